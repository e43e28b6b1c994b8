"""The real loader's wiring, without starting engines: engine args and per-load ``QUANT_CONFIG``."""

from __future__ import annotations

import os
from typing import Any

import pytest

from server.engine.vllm_loader import QUANT_CONFIG_ENV, VllmEngineLoader, build_engine_args
from server.profiles.schema import ModelProfile


def test_engine_args_carry_the_profile_and_served_name() -> None:
    model = ModelProfile(model="/models/x", engine_args={"max_model_len": 256, "dtype": "float32"})
    args = build_engine_args("x-chat", model, sleep_mode=True)
    assert (args.model, args.max_model_len, args.dtype) == ("/models/x", 256, "float32")
    assert args.served_model_name == "x-chat" and args.enable_sleep_mode is True


def test_the_servers_reasoning_parser_reaches_the_engine_and_a_models_own_wins() -> None:
    from server.cli.serve import engine_defaults
    from server.engine.factory import with_engine_defaults
    from server.profiles import Profile

    defaults = engine_defaults({"max_model_len": 128}, "qwen3")
    own = ModelProfile(model="/m/own", reasoning_parser="deepseek_r1")
    profile = Profile(
        path="p.yaml", default_model="plain", models={"plain": ModelProfile(model="/m/plain"), "own": own}
    )
    models = with_engine_defaults(profile, defaults).models
    assert build_engine_args("plain", models["plain"]).reasoning_parser == "qwen3"
    assert build_engine_args("own", models["own"]).reasoning_parser == "deepseek_r1"
    assert build_engine_args("plain", ModelProfile(model="/m/plain")).reasoning_parser in (None, "")


async def test_each_load_sees_only_its_own_quant_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    seen: list[str | None] = []

    def fake_from_engine_args(args: Any, **kwargs: Any) -> str:
        seen.append(os.environ.get(QUANT_CONFIG_ENV))
        return f"engine:{args.model}"

    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(fake_from_engine_args))
    monkeypatch.delenv(QUANT_CONFIG_ENV, raising=False)
    loader = VllmEngineLoader()
    await loader.load("llama", ModelProfile(model="/m/llama", quant_config="/q/llama.json"))
    await loader.load("qwen", ModelProfile(model="/m/qwen"))
    assert seen == ["/q/llama.json", None]
    assert QUANT_CONFIG_ENV not in os.environ
