"""Fake engines and loaders that follow the contracts of vLLM's ``AsyncLLM`` the manager relies on.

A fake engine refuses to generate once unloaded or while asleep, and ends a stream early, without an error, when
``abort`` names its request: vLLM 0.32 ends an aborted request's stream normally with ``finish_reason: abort``.
Level-2 sleep discards its weights (zeroed) until ``reload_weights`` brings them back, as vLLM's; an engine whose
``reload_misses`` is set wakes answering from zeroed weights (vllm#29341), which :func:`fake_probe` reads as a
model that answers otherwise. These are fakes: vLLM refuses sleep mode on CPU, so no real wake is tested here.
Loads, unloads and bundle builds can fail on demand, so the switch logic is tested under injected failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from server.engine import EngineStart
from server.engine.runtime import ENGINE_STARTS, spawn_only
from server.frontend import ProbeAnswer
from server.profiles.schema import ModelProfile
from server.vllm_plugin.protocol import KeptKV

__all__ = [
    "FakeBundle",
    "FakeBundleBuilder",
    "FakeEngine",
    "FakeLoader",
    "InjectedFailure",
    "fake_models",
    "fake_probe",
]


class InjectedFailure(RuntimeError):
    """A failure the test asked for."""


class FakeEngine:
    """One model's engine."""

    def __init__(self, name: str, *, sleep_mode: bool = False) -> None:
        self.name = name
        self.sleep_mode = sleep_mode
        self.alive = True
        self.asleep = False
        self.sleep_calls: list[int] = []
        self.wake_calls: list[list[str] | None] = []
        self.rpc_calls: list[str] = []
        self.aborted: set[str] = set()
        self.yielded = 0  # tokens yielded so far, by every request
        self.weights_zeroed = False
        self.reload_misses = False  # a drill: reload_weights leaves the weights zeroed
        self.answers_as = name  # whose answers it gives (:func:`fake_probe`): another checkpoint's, in a drill
        self._abort_events: dict[str, asyncio.Event] = {}

    async def generate(self, request_id: str, steps: int, step_s: float = 0.001) -> AsyncIterator[str]:
        """Yield ``steps`` tokens, each naming this engine's model; stop early, quietly, when aborted."""
        event = self._abort_events.setdefault(request_id, asyncio.Event())
        if request_id in self.aborted:
            event.set()  # aborted before it started, as a bundle's abort() can do
        try:
            for _ in range(steps):
                if event.is_set():
                    # vLLM ends an aborted request's stream without touching the engine again, so a request a
                    # switch aborted ends quietly even when its consumer resumes after the engine was parked.
                    return
                self._check_usable()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), step_s)
                if event.is_set():
                    return
                self._check_usable()
                self.yielded += 1
                yield self.name
        finally:
            self._abort_events.pop(request_id, None)

    @property
    def running(self) -> int:
        """How many requests are generating now (as vLLM's ``num_requests_running``)."""
        return len(self._abort_events)

    def _check_usable(self) -> None:
        if not self.alive:
            raise RuntimeError(f"engine {self.name} used after unload")
        if self.asleep:
            raise RuntimeError(f"engine {self.name} used while asleep")

    async def abort(self, request_id: str | Iterable[str]) -> None:
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for rid in ids:
            self.aborted.add(rid)
            if rid in self._abort_events:
                self._abort_events[rid].set()

    async def sleep(self, level: int = 1) -> None:
        assert self.sleep_mode, "vLLM refuses sleep() on an engine started without enable_sleep_mode"
        self.sleep_calls.append(level)
        self.asleep = True
        self.weights_zeroed = self.weights_zeroed or level == 2

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        self.wake_calls.append(tags)
        if tags is None or "kv_cache" in tags:
            self.asleep = False
        return not self.asleep

    async def is_sleeping(self) -> bool:
        return self.asleep

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = ()) -> Any:
        self.rpc_calls.append(method)
        if method == "reload_weights" and not self.reload_misses:
            self.weights_zeroed = False
        return [None]


@dataclass
class FakeLoader:
    """Loads :class:`FakeEngine` objects; fails on demand.

    Attributes:
        fail_load: Model names whose next load fails (consumed).
        always_fail: Model names every load of which fails.
        load_failure_rate, unload_failure_rate: Random failure rates (with ``rng``).
        delay_s: Simulated load time.
        kept: Model name to what its engine keeps of its prefix blocks when unloaded (the real loader asks
            the engine core, ``keep_before_stop``; None for a model not listed: its engine keeps nothing).
    """

    rng: random.Random = field(default_factory=lambda: random.Random(0))
    fail_load: set[str] = field(default_factory=set)
    always_fail: set[str] = field(default_factory=set)
    load_failure_rate: float = 0.0
    unload_failure_rate: float = 0.0
    delay_s: float = 0.0
    loads: list[str] = field(default_factory=list)
    unloads: list[str] = field(default_factory=list)
    live: list[FakeEngine] = field(default_factory=list)
    kept: dict[str, KeptKV] = field(default_factory=dict)
    #: Model name to the model whose answers its next engines give (a checkpoint that changed under it).
    answers_as: dict[str, str] = field(default_factory=dict)
    #: Engine cores fork from a warm launcher: each start records a forked :class:`EngineStart`, except inside
    #: ``spawned_starts`` (a proof's plain start), as the real loader's starts do.
    forks: bool = False
    #: Model name to the model whose answers its forked engines give (a fork's stale state); spawned ones are right.
    forked_answers_as: dict[str, str] = field(default_factory=dict)

    async def load(self, name: str, model: ModelProfile, *, sleep_mode: bool = False) -> FakeEngine:
        await asyncio.sleep(self.delay_s)
        if name in self.fail_load or name in self.always_fail or self.rng.random() < self.load_failure_rate:
            self.fail_load.discard(name)
            raise InjectedFailure(f"injected load failure for {name}")
        engine = FakeEngine(name, sleep_mode=sleep_mode)
        engine.answers_as = self.answers_as.get(name, name)
        if self.forks:
            forked = not spawn_only()
            ENGINE_STARTS.record(engine, EngineStart(started_at=time.time(), total_ms=0, phases_ms={}, forked=forked))
            if forked:
                engine.answers_as = self.forked_answers_as.get(name, engine.answers_as)
        self.loads.append(name)
        self.live.append(engine)
        return engine

    async def unload(self, engine: FakeEngine) -> KeptKV | None:
        await asyncio.sleep(0)
        kept = self.kept.get(engine.name) if engine.alive else None  # the keep asks the running engine first
        engine.alive = False
        self.unloads.append(engine.name)
        if engine in self.live:
            self.live.remove(engine)
        if self.rng.random() < self.unload_failure_rate:
            raise InjectedFailure(f"injected unload failure for {engine.name}")
        return kept


@dataclass(frozen=True)
class FakeBundle:
    """A frontend bundle: remembers the model and engine it was built for, and aborts a request through that
    engine, as the real bundle does (the real bundle also catches engine requests submitted after the abort)."""

    name: str
    engine: Any

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)


@dataclass
class FakeBundleBuilder:
    """Builds :class:`FakeBundle` objects; fails on demand."""

    rng: random.Random = field(default_factory=lambda: random.Random(0))
    failure_rate: float = 0.0
    fail_for: set[str] = field(default_factory=set)
    built: list[str] = field(default_factory=list)

    async def __call__(self, name: str, profile: ModelProfile, engine: FakeEngine) -> FakeBundle:
        await asyncio.sleep(0)
        if name in self.fail_for or self.rng.random() < self.failure_rate:
            raise InjectedFailure(f"injected bundle failure for {name}")
        self.built.append(name)
        return FakeBundle(name, engine)


async def fake_probe(name: str, profile: ModelProfile, bundle: FakeBundle) -> ProbeAnswer:
    """The proof's probe on a fake engine: confident tokens of the model's own, or what zeroed weights answer (every
    logit equal: token 0, no gap)."""
    if bundle.engine.weights_zeroed:
        return ProbeAnswer(tokens=[0] * 6, top=[[(0, -6.9), (1, -6.9)]] * 6)
    answers_as = bundle.engine.answers_as
    tokens = [len(answers_as) + sum(map(ord, answers_as)) % 50 + i for i in range(6)]
    return ProbeAnswer(tokens=tokens, top=[[(token, -0.01), (token + 1, -5.0)] for token in tokens])


def fake_models(*names: str) -> dict[str, ModelProfile]:
    """Model profiles for the given names (the fakes ignore the paths)."""
    return {name: ModelProfile(model=f"/models/{name}") for name in names}
