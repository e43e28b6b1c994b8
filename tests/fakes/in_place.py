"""A fake of the in-place swap (``server/engine/runtime/in_place_swap.py``: ``InPlaceSwap``), following its
contract: ``unload`` releases the engine's model, ``load`` loads another into the same engine and checks the
model the engine core then reports (raising ``LoadedModelMismatch`` on a mismatch), ``incompatibility`` says why
a model cannot be loaded in place. The fake engine's ``name`` is the model it holds, so what it generates tells
which model answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from server.engine.runtime.in_place_swap import LoadedModelMismatch, LoadOutcome, profile_incompatibility
from server.profiles.schema import ModelProfile
from server.vllm_plugin.protocol import KeptKV, LoadedModel, LoadResult, UnloadResult
from tests.fakes.engines import FakeEngine, InjectedFailure

__all__ = ["FakeInPlaceSwap"]


@dataclass
class FakeInPlaceSwap:
    """Swaps the model of a :class:`FakeEngine` in place; fails on demand.

    Attributes:
        fail_unload: Unloads fail while set.
        fail_load: Model names whose loads fail (each failure consumes one entry of ``fail_load_times``).
        fail_load_times: How many times each name in ``fail_load`` fails (default once).
        wrong_model: Model names whose load "succeeds" with another model reported loaded.
        incompatible: Model name to the reason it cannot be loaded in place.
        same_shape: Model names the engine core loads by copying weights (``method: weights``).
        drop_ms: What the engine core reports for dropping the kept model before a ``reconfigure`` load.
        kept: What each unload reports it kept of the prefix blocks (the default: the pool is off).
    """

    fail_unload: bool = False
    fail_load: set[str] = field(default_factory=set)
    fail_load_times: dict[str, int] = field(default_factory=dict)
    wrong_model: set[str] = field(default_factory=set)
    incompatible: dict[str, str] = field(default_factory=dict)
    same_shape: set[str] = field(default_factory=set)
    drop_ms: float = 0.0
    kept: KeptKV = field(default_factory=KeptKV)
    unloads: list[str] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)

    def prepare(self, models: Sequence[tuple[str, ModelProfile]]) -> None:
        self.prepared.extend(name for name, _ in models)

    async def incompatibility(self, engine: Any, held: ModelProfile, name: str, profile: ModelProfile) -> str | None:
        # The real swap's own profile rule, then the fake's list in place of the engine config check.
        return profile_incompatibility(held, profile) or self.incompatible.get(name)

    async def unload(self, engine: FakeEngine) -> UnloadResult:
        assert engine.alive, "unload on a stopped engine"
        if self.fail_unload:
            engine.name = "<half-unloaded>"
            raise InjectedFailure("injected unload failure")
        self.unloads.append(engine.name)
        engine.name = "<empty>"
        kept = self.kept
        return UnloadResult(
            unload_ms=5.0 + kept.keep_ms,
            gc_ms=1.0,
            kept_blocks=kept.kept_blocks,
            kept_bytes=kept.kept_bytes,
            keep_ms=kept.keep_ms,
        )

    async def load(self, engine: FakeEngine, name: str, profile: ModelProfile) -> LoadOutcome:
        assert engine.alive, "load on a stopped engine"
        self.loads.append(name)
        if name in self.fail_load:
            left = self.fail_load_times.get(name, 1) - 1
            self.fail_load_times[name] = left
            if left <= 0:
                self.fail_load.discard(name)
            engine.name = "<broken>"
            raise InjectedFailure(f"injected in-place load failure for {name}")
        reported = "<another>" if name in self.wrong_model else name
        engine.name = reported
        if reported != name:
            raise LoadedModelMismatch(f"the engine core reports {reported!r} loaded, not {name!r}")
        loaded = LoadedModel(model=profile.model, served_model_name=name)
        weights = name in self.same_shape
        result = LoadResult(
            load_ms=10.0,
            kv_cache_ms=3.0,
            scheduler_ms=1.0,
            loaded=loaded,
            method="weights" if weights else "reconfigure",
            unload_ms=0.0 if weights else self.drop_ms,
        )
        return LoadOutcome(result, 2.0)
