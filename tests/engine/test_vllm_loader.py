"""The real loader's wiring, without starting engines: engine args and each load's environment."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from server.engine.runtime import LAUNCHER_ENV
from server.engine.runtime.start_process import forks
from server.engine.runtime.vllm_loader import AOT_COMPILE_ENV, QUANT_CONFIG_ENV, VllmEngineLoader, build_engine_args
from server.profiles.schema import ModelProfile
from server.vllm_plugin.protocol import IN_PLACE_ENGINE_ENV, WORKER_EXTENSION


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """These loads start no engine (vLLM's start is faked): no launcher to warm up for them."""
    monkeypatch.setenv(LAUNCHER_ENV, "0")


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


async def test_only_engines_for_in_place_swaps_start_with_the_heap_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    seen: list[dict[str, str | None]] = []

    def fake_from_engine_args(args: Any, **kwargs: Any) -> str:
        seen.append({name: os.environ.get(name) for name in IN_PLACE_ENGINE_ENV})
        return f"engine:{args.model}"

    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(fake_from_engine_args))
    for name in IN_PLACE_ENGINE_ENV:
        monkeypatch.delenv(name, raising=False)
    await VllmEngineLoader(worker_extension=WORKER_EXTENSION).load("a", ModelProfile(model="/m/a"))
    await VllmEngineLoader().load("b", ModelProfile(model="/m/b"))
    assert seen == [dict(IN_PLACE_ENGINE_ENV), dict.fromkeys(IN_PLACE_ENGINE_ENV)]
    assert not set(IN_PLACE_ENGINE_ENV) & set(os.environ), "the server's own process keeps glibc's defaults"


def test_engines_for_in_place_swaps_are_forked_by_the_launcher_as_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """Their malloc settings reach a forked core through ``mallopt`` (tests/engine/test_launcher_malloc.py)."""
    monkeypatch.setenv(LAUNCHER_ENV, "1")
    model = ModelProfile(model="/m/plain")
    assert forks(build_engine_args("plain", model, worker_extension=WORKER_EXTENSION))
    assert forks(build_engine_args("plain", model))


async def test_cpu_engines_start_without_vllms_aot_compile_cache_unless_the_environment_sets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    seen: list[str | None] = []

    def fake_from_engine_args(args: Any, **kwargs: Any) -> str:
        seen.append(os.environ.get(AOT_COMPILE_ENV))
        return f"engine:{args.model}"

    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(fake_from_engine_args))
    monkeypatch.delenv(AOT_COMPILE_ENV, raising=False)
    await VllmEngineLoader().load("a", ModelProfile(model="/m/a"))
    assert AOT_COMPILE_ENV not in os.environ  # only around the start
    monkeypatch.setenv(AOT_COMPILE_ENV, "1")  # the operator's choice wins
    await VllmEngineLoader().load("b", ModelProfile(model="/m/b"))
    assert seen == ["0", "1"]


async def test_a_start_past_load_timeout_kills_what_it_spawned_and_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from vllm.v1.engine.async_llm import AsyncLLM

    from server.engine.runtime import vllm_loader
    from server.engine.supervision.watch import LoadTimedOut

    killed = threading.Event()
    spawned = iter([{10}, {10, 11, 12}])  # before the start, then with the start's engine core and worker
    kills: list[list[int]] = []

    def hanging_start(args: Any, **kwargs: Any) -> str:
        killed.wait(30)  # a start ends only when its processes die
        raise RuntimeError("Engine core initialization failed")

    def kill(pids: list[int]) -> None:
        kills.append(list(pids))
        killed.set()

    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(hanging_start))
    monkeypatch.setattr(vllm_loader, "spawned_pids", lambda: next(spawned))
    monkeypatch.setattr(vllm_loader, "kill_process_trees", kill)
    loader = VllmEngineLoader(load_timeout_s=0.2)
    with pytest.raises(LoadTimedOut, match=r"within load_timeout_s \(0.2 s\)"):
        await loader.load("slow", ModelProfile(model="/m/slow"))
    assert kills == [[11, 12]]  # only what this start spawned


async def test_a_loaded_engine_is_watched_until_its_unload(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    from server.engine.supervision.watch import EngineWatches
    from tests.fakes.supervised import FakeSupervisedEngine

    engine = FakeSupervisedEngine()
    engine.shutdown = lambda: None  # type: ignore[attr-defined]
    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(lambda args, **kwargs: engine))
    watches = EngineWatches()
    loader = VllmEngineLoader(watches=watches)
    assert await loader.load("a", ModelProfile(model="/m/a")) is engine
    watch = watches.of(engine)
    assert watch is not None and watch.running
    await loader.unload(engine)
    assert watches.of(engine) is None and not watch.running


async def test_an_unload_cancels_the_output_handler_before_the_engine_core_stops() -> None:
    """vLLM's shutdown ends the engine core first; run in a thread, its output handler could see the dead core and
    log an EngineDeadError traceback for a shutdown on purpose. The loader cancels the handler first."""
    handler_ended_first: list[bool] = []

    class Engine:
        def __init__(self) -> None:
            self.output_handler = asyncio.create_task(asyncio.Event().wait())

        def shutdown(self) -> None:
            handler_ended_first.append(self.output_handler.done())

    engine = Engine()
    await asyncio.sleep(0)
    await VllmEngineLoader().unload(engine)
    assert handler_ended_first == [True] and engine.output_handler.cancelled()
