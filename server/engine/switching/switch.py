"""One switch, step by step: drain, abort the rest, park the old model, bring up the target, or roll back.

The model slots record the switch (closing the gate) before a :class:`SwitchRun` starts and publishes its outcome in
one assignment after it ends, so nothing here is visible to requests half-done. Every change of a slot goes
through the slots' intent methods; the strategy only operates on engines.

Failure handling:
    * parking the old model fails: it goes back to ``active`` when it still holds its engine; when its engine
      is gone anyway (an unload that reported an error), the switch goes on;
    * bringing up the target fails (its proof included): the target is released and marked ``failed`` with the
      reason, and the old model is brought back (reloaded if the strategy had unloaded it) and proven as the target
      was; a restore whose proof fails counts as a failed restore;
    * both fail: no model is published, ``/ready`` says so, and the next switch may try again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

from server.engine.switching.model_slots import ModelSlots, describe_error
from server.engine.switching.verification import ModelProof
from server.engine.types import (
    ActivationMetrics,
    EngineError,
    Published,
    RequestAbortedBySwitch,
    SwitchFailed,
    SwitchReport,
)

__all__ = ["SwitchOutcome", "SwitchRun"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")


@dataclass(frozen=True)
class SwitchOutcome(Generic[B]):
    """What the manager publishes after a switch: the model now active (or None), the report or the error."""

    published: Published[B] | None
    report: SwitchReport | None
    error: EngineError | None


@dataclass
class SwitchRun(Generic[B]):
    """The state of one switch while it runs. Built by the manager, executed once."""

    slots: ModelSlots[B]
    strategy_name: str
    previous: Published[B] | None
    target: str
    memory_probe: Callable[[], float]
    abort_grace: float
    proof: ModelProof[B] | None = None

    async def execute(self, drain_timeout: float) -> SwitchOutcome[B]:
        """Run the switch; never raises an :class:`Exception`, it reports it in the outcome."""
        slots, target = self.slots, self.target
        started = time.perf_counter()
        old = self.previous.model if self.previous else None
        memory_before = self._memory()
        drain_ms, aborted = 0.0, 0
        if old is not None:
            error = RequestAbortedBySwitch(old, target)
            why = f"for the switch to {target}"
            drain_ms, aborted = await slots.drain_active(old, drain_timeout, error, why, self.abort_grace)
        reconfigure_started = time.perf_counter()
        if old is not None:
            try:
                await slots.park(old)
            except Exception as exc:
                return self._park_failed(old, exc)
        memory_after_unload = self._memory()
        verify = None
        try:
            brought = await slots.bring_up(target)
            published = await slots.publish(target)
            if self.proof is not None:  # before the switch closes: requests wait, none reaches an unproven engine
                published, verify = await self.proof.prove(slots, target, brought.path, published)
        except Exception as exc:
            return await self._roll_back(old, exc)
        slots.activated(target)
        reconfigure_ms = (time.perf_counter() - reconfigure_started) * 1000.0
        report = self._report(
            started, reconfigure_ms, brought.metrics, memory_before, memory_after_unload, drain_ms, aborted
        )
        if verify is not None:
            report = msgspec.structs.replace(report, verify=verify)
        logger.info(
            "%s in %.0f ms (drain %.0f ms, %d aborted, strategy %s)",
            _switched(report.previous_model, report.current_model),
            report.duration_ms,
            drain_ms,
            aborted,
            self.strategy_name,
        )
        return SwitchOutcome(published, report, None)

    # -- failures -------------------------------------------------------------------------------------------

    def _park_failed(self, old: str, exc: Exception) -> SwitchOutcome[B]:
        """The old model could not be parked but still holds its engine: it stays active (the model slots did that)."""
        assert self.previous is not None
        reason = f"could not park '{old}': {describe_error(exc)}"
        logger.error("%s; it stays active", reason)
        return SwitchOutcome(self.previous, None, SwitchFailed(self.target, reason, old))

    async def _roll_back(self, old: str | None, exc: Exception) -> SwitchOutcome[B]:
        slots = self.slots
        reason = describe_error(exc)
        logger.error("activating %s failed: %s; rolling back", self.target, reason)
        await slots.fail(self.target, reason)
        if old is None:
            return SwitchOutcome(None, None, SwitchFailed(self.target, reason, None))
        try:
            brought = await slots.bring_up(old)
            restored = await slots.publish(old)
            if self.proof is not None:  # a wake, restore or forked start of the old model is proven as the target's
                restored, _ = await self.proof.prove(slots, old, brought.path, restored)
        except Exception as restore_exc:
            restore_reason = describe_error(restore_exc)
            logger.error("restoring %s failed too: %s", old, restore_reason)
            await slots.fail(old, f"restore after a failed switch failed: {restore_reason}")
            return SwitchOutcome(None, None, SwitchFailed(self.target, reason, None))
        slots.activated(old)
        return SwitchOutcome(restored, None, SwitchFailed(self.target, reason, old))

    # -- reporting ------------------------------------------------------------------------------------------

    def _memory(self) -> float | None:
        try:
            return round(self.memory_probe(), 1)
        except Exception:  # a report without memory beats a failed switch
            logger.exception("memory probe failed")
            return None

    def _report(
        self,
        started: float,
        reconfigure_ms: float,
        metrics: ActivationMetrics | None,
        memory_before: float | None,
        memory_after_unload: float | None,
        drain_ms: float,
        aborted: int,
    ) -> SwitchReport:
        measured = metrics or ActivationMetrics()
        if measured.memory_before_mb is None:
            # Turnout's probe around the park; a host that measured the device around its own unload gave its
            # figures in the metrics, the ones that mean something there.
            freed = None
            if memory_before is not None and memory_after_unload is not None:
                freed = round(memory_before - memory_after_unload, 1)
            measured = msgspec.structs.replace(
                measured,
                memory_before_mb=memory_before,
                memory_after_unload_mb=memory_after_unload,
                freed_memory_mb=freed,
            )
        timings = {name: getattr(measured, name) for name in measured.__struct_fields__}
        for name in _ROUNDED:
            timings[name] = _rounded(timings[name])
        if timings["reconfigure_ms"] is None:
            timings["reconfigure_ms"] = round(reconfigure_ms, 1)
        return SwitchReport(
            **timings,
            previous_model=self.previous.model if self.previous else None,
            current_model=self.target,
            switched=True,
            duration_ms=round((time.perf_counter() - started) * 1000.0, 1),
            drain_ms=round(drain_ms, 1),
            aborted_requests=aborted,
            strategy=self.strategy_name,
        )


#: The timing fields a strategy measures to a fraction of a millisecond; the report keeps one decimal.
_ROUNDED = ("reconfigure_ms", "unload_ms", "load_ms", "kv_cache_ms", "frontend_ms", "keep_ms")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _switched(previous: str | None, current: str) -> str:
    """``switched a -> b``, or ``loaded b`` when no model was active (at start-up, after a forced unload)."""
    return f"loaded {current}" if previous is None else f"switched {previous} -> {current}"
