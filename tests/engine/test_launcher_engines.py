"""Engines forked by the engine launcher, on real tiny vLLM engines: the same greedy answers as a spawned engine's,
the core in its own process group with its worker, and a launcher death that leaves a running engine answering
while the launcher comes back and forks the next one. Each prints its start times (start to first token)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from server.engine.runtime import LAUNCHER_ENV, LaunchedProcess, engine_launcher
from server.engine.runtime.vllm_loader import VllmEngineLoader
from server.engine.supervision.watch import engine_processes
from server.profiles.schema import ModelProfile
from tests.engine.engine_args import TINY_ENGINE_ARGS

pytestmark = pytest.mark.engine

ENGINE_ARGS = TINY_ENGINE_ARGS
PROMPTS = ("Hello there", "The quick brown fox", "1 2 3 4", "def main():")


@pytest.fixture(scope="module")
def model(tiny_models: dict[str, Path]) -> ModelProfile:
    return ModelProfile(model=str(tiny_models["tiny-plain"]), engine_args=ENGINE_ARGS)


@pytest.fixture(scope="module")
async def launched(model: ModelProfile) -> AsyncIterator[tuple[Any, float]]:
    """One engine whose core the launcher forked (the launcher warmed up first, as at a server's start)."""
    loader = VllmEngineLoader()
    loader.vllm_config("plain", model)  # as `turnout serve` does, the plan (vLLM's configs) before the launcher
    warming = time.perf_counter()
    assert await asyncio.to_thread(engine_launcher().wait_ready, 300)
    print(f"\nlauncher ready after {time.perf_counter() - warming:.1f} s (0 if an earlier test warmed it)")
    started = time.perf_counter()
    engine = await loader.load("plain", model)
    await _answers(engine, PROMPTS[:1])
    took = time.perf_counter() - started
    print(f"\nforked start: {took:.1f} s to the first answer")
    yield engine, took
    await loader.unload(engine)


async def _answers(engine: Any, prompts: tuple[str, ...]) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=12)
    answers = []
    for index, prompt in enumerate(prompts):
        final = None
        async for output in engine.generate(prompt, params, f"p{index}-{time.monotonic_ns()}"):
            final = output
        assert final is not None
        answers.append(list(final.outputs[0].token_ids))
    return answers


async def test_a_forked_engine_answers_as_a_spawned_one(
    launched: tuple[Any, float], model: ModelProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, forked_s = launched
    (core,) = engine_processes(engine)
    assert isinstance(core, LaunchedProcess), "the engine core was not forked by the launcher"
    forked = await _answers(engine, PROMPTS)
    monkeypatch.setenv(LAUNCHER_ENV, "0")
    loader = VllmEngineLoader()
    started = time.perf_counter()
    spawned_engine = await loader.load("plain", model)
    try:
        (spawned_core,) = engine_processes(spawned_engine)
        assert not isinstance(spawned_core, LaunchedProcess)
        spawned = await _answers(spawned_engine, PROMPTS)
        spawned_s = time.perf_counter() - started
    finally:
        await loader.unload(spawned_engine)
    assert forked == spawned
    print(f"\nstart to answers: forked {forked_s:.1f} s (one prompt), spawned {spawned_s:.1f} s; answers {forked}")


async def test_the_forked_core_leads_its_own_group_with_its_worker(launched: tuple[Any, float]) -> None:
    engine, _ = launched
    (core,) = engine_processes(engine)
    launcher = engine_launcher()
    process = psutil.Process(core.pid)
    assert process.ppid() == launcher.pid and os.getpgid(core.pid) == core.pid
    workers = process.children()
    assert workers and all(os.getpgid(worker.pid) == core.pid for worker in workers)
    assert os.getpgid(0) != core.pid


async def test_a_launcher_death_leaves_the_engine_answering_and_the_launcher_forks_again(
    launched: tuple[Any, float], model: ModelProfile
) -> None:
    engine, _ = launched
    launcher = engine_launcher()
    first = launcher.pid
    assert first is not None
    before = await _answers(engine, PROMPTS[:1])
    os.kill(first, signal.SIGKILL)
    await asyncio.sleep(1.0)
    assert await _answers(engine, PROMPTS[:1]) == before  # its engine runs on
    (core,) = engine_processes(engine)
    assert core.exitcode is None and core.is_alive()
    deadline = time.monotonic() + 300
    while launcher.state != "ready" or launcher.pid == first:
        assert time.monotonic() < deadline, f"the launcher did not come back ({launcher.state})"
        await asyncio.sleep(0.2)
    loader = VllmEngineLoader()
    started = time.perf_counter()
    again = await loader.load("plain", model)
    try:
        (again_core,) = engine_processes(again)
        assert isinstance(again_core, LaunchedProcess) and psutil.Process(again_core.pid).ppid() == launcher.pid
        assert await _answers(again, PROMPTS[:1]) == before
    finally:
        await loader.unload(again)
    print(f"\nafter the launcher's death: forked again from the new launcher in {time.perf_counter() - started:.1f} s")
