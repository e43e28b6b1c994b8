"""A fake of the parts of vLLM's ``AsyncLLM`` that an engine watch reads: the dead flag, the engine-core process
handles and the utility channel, each of which a test can break (exit, flag, freeze)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

__all__ = ["FakeProcess", "FakeSupervisedEngine", "KillRecorder"]


@dataclass
class FakeProcess:
    """A ``multiprocessing`` handle: a pid, and an exit code once it ended (negative: the signal)."""

    pid: int
    exitcode: int | None = None


class FakeSupervisedEngine:
    """An engine whose core answers health checks until it is frozen, and that can die or be flagged dead."""

    def __init__(self, pid: int = 424242) -> None:
        self.process = FakeProcess(pid)
        self.errored = False
        self.frozen = False
        self.calls: list[str] = []
        self.output_handler: asyncio.Future[None] | None = None
        self._release = asyncio.Event()
        manager = SimpleNamespace(processes=[self.process])
        self.engine_core = SimpleNamespace(
            resources=SimpleNamespace(engine_manager=manager), call_utility_async=self._call_utility
        )

    async def _call_utility(self, method: str, *args: Any) -> Any:
        self.calls.append(method)
        if self.frozen:
            await self._release.wait()  # a stopped engine core never answers
        return False

    def exit(self, code: int) -> None:
        """The engine-core process ends with ``code`` (negative: killed by that signal)."""
        self.process.exitcode = code


@dataclass
class KillRecorder:
    """Stands in for killing processes: records the pids and marks the fake's process as killed by SIGKILL."""

    engine: FakeSupervisedEngine | None = None
    killed: list[list[int]] = field(default_factory=list)

    def __call__(self, pids: Sequence[int]) -> None:
        self.killed.append(list(pids))
        if self.engine is not None:
            self.engine.exit(-9)
