"""A fake of the parts of vLLM's ``AsyncLLM`` that an engine watch reads: the dead flag, the engine-core process
handles, the utility channel and the outputs taken from the engine core, each of which a test can break (exit,
flag, freeze) or drive (send outputs)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

__all__ = ["FakeEngineCoreClient", "FakeProcess", "FakeSleepingEngine", "FakeSupervisedEngine", "KillRecorder"]


@dataclass
class FakeProcess:
    """A ``multiprocessing`` handle: a pid, and an exit code once it ended (negative: the signal)."""

    pid: int
    exitcode: int | None = None


class FakeEngineCoreClient:
    """vLLM's engine-core client as a watch sees it: the process handles, the utility channel, and the batches of
    outputs the output handler takes (``get_output_async``) once the engine core ``sent`` them."""

    def __init__(self, process: FakeProcess, call_utility: Callable[..., Awaitable[Any]]) -> None:
        self.resources = SimpleNamespace(engine_manager=SimpleNamespace(processes=[process]))
        self.call_utility_async = call_utility
        self._outputs: asyncio.Queue[object] = asyncio.Queue()

    def send(self, outputs: object) -> None:
        """The engine core sends a batch of outputs (the output handler takes it when it gets to it)."""
        self._outputs.put_nowait(outputs)

    async def get_output_async(self) -> object:
        return await self._outputs.get()


class FakeSupervisedEngine:
    """An engine whose core answers health checks until it is frozen, and that can die or be flagged dead."""

    def __init__(self, pid: int = 424242) -> None:
        self.process = FakeProcess(pid)
        self.errored = False
        self.frozen = False
        self.calls: list[str] = []
        self.output_handler: asyncio.Future[None] | None = None
        self._release = asyncio.Event()
        self.engine_core = FakeEngineCoreClient(self.process, self._call_utility)

    async def _call_utility(self, method: str, *args: Any) -> Any:
        self.calls.append(method)
        if self.frozen:
            await self._release.wait()  # a stopped engine core never answers
        return False

    def exit(self, code: int) -> None:
        """The engine-core process ends with ``code`` (negative: killed by that signal)."""
        self.process.exitcode = code


class FakeSleepingEngine(FakeSupervisedEngine):
    """A supervised engine with vLLM's sleep mode whose core, as vLLM's, serves one utility at a time: a health
    check sent while it sleeps or wakes waits until that is done. Each step takes ``step_s``; a step that fails
    (the engine died meanwhile) raises as vLLM's ``EngineDeadError`` would."""

    def __init__(self, step_s: float, pid: int = 434343) -> None:
        super().__init__(pid)
        self.step_s = step_s
        self.asleep = False
        self.steps: list[str] = []
        self._busy = asyncio.Lock()

    async def _call_utility(self, method: str, *args: Any) -> Any:
        async with self._busy:
            return await super()._call_utility(method, *args)

    async def _step(self, name: str) -> None:
        async with self._busy:
            await asyncio.sleep(self.step_s)
            if self.process.exitcode is not None:
                raise RuntimeError(f"{name}: the engine core died")
            self.steps.append(name)

    async def abort(self, request_id: Any) -> None:
        pass

    async def sleep(self, level: int = 1) -> None:
        await self._step(f"sleep({level})")
        self.asleep = True

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await self._step(f"wake_up({tags})")
        self.asleep = False

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = ()) -> Any:
        await self._step(method)

    async def is_sleeping(self) -> bool:
        return self.asleep


@dataclass
class KillRecorder:
    """Stands in for killing processes: records the pids and marks the fake's process as killed by SIGKILL."""

    engine: FakeSupervisedEngine | None = None
    killed: list[list[int]] = field(default_factory=list)

    def __call__(self, pids: Sequence[int]) -> None:
        self.killed.append(list(pids))
        if self.engine is not None:
            self.engine.exit(-9)
