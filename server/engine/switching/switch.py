"""One switch, step by step: drain, abort the rest, park the old model, bring up the target, or roll back.

The device records the switch (closing the gate) before a :class:`SwitchRun` starts and publishes its outcome in
one assignment after it ends, so nothing here is visible to requests half-done. Every change of a slot goes
through the device's intent methods; the strategy only operates on engines.

Failure handling:
    * parking the old model fails: it goes back to ``active`` when it still holds its engine; when its engine
      is gone anyway (an unload that reported an error), the switch goes on;
    * bringing up the target fails: the target is released and marked ``failed`` with the reason, and the old
      model is brought back (reloaded if the strategy had unloaded it);
    * both fail: no model is published, ``/ready`` says so, and the next switch may try again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from server.engine.switching.model_slots import ModelSlots, describe_error
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

    device: ModelSlots[B]
    strategy_name: str
    previous: Published[B] | None
    target: str
    memory_probe: Callable[[], float]
    abort_grace: float

    async def execute(self, drain_timeout: float) -> SwitchOutcome[B]:
        """Run the switch; never raises an :class:`Exception`, it reports it in the outcome."""
        device, target = self.device, self.target
        started = time.perf_counter()
        old = self.previous.model if self.previous else None
        memory_before = self._memory()
        drain_ms, aborted = 0.0, 0
        if old is not None:
            error = RequestAbortedBySwitch(old, target)
            why = f"for the switch to {target}"
            drain_ms, aborted = await device.drain_active(old, drain_timeout, error, why, self.abort_grace)
        reconfigure_started = time.perf_counter()
        if old is not None:
            try:
                await device.park(old)
            except Exception as exc:
                return self._park_failed(old, exc)
        memory_after_unload = self._memory()
        try:
            metrics = await device.bring_up(target)
            published = await device.publish(target)
        except Exception as exc:
            return await self._roll_back(old, exc)
        device.activated(target)
        reconfigure_ms = (time.perf_counter() - reconfigure_started) * 1000.0
        report = self._report(started, reconfigure_ms, metrics, memory_before, memory_after_unload, drain_ms, aborted)
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
        """The old model could not be parked but still holds its engine: it stays active (the device did that)."""
        assert self.previous is not None
        reason = f"could not park '{old}': {describe_error(exc)}"
        logger.error("%s; it stays active", reason)
        return SwitchOutcome(self.previous, None, SwitchFailed(self.target, reason, old))

    async def _roll_back(self, old: str | None, exc: Exception) -> SwitchOutcome[B]:
        device = self.device
        reason = describe_error(exc)
        logger.error("activating %s failed: %s; rolling back", self.target, reason)
        await device.fail(self.target, reason)
        if old is None:
            return SwitchOutcome(None, None, SwitchFailed(self.target, reason, None))
        try:
            await device.bring_up(old)
            restored = await device.publish(old)
        except Exception as restore_exc:
            restore_reason = describe_error(restore_exc)
            logger.error("restoring %s failed too: %s", old, restore_reason)
            await device.fail(old, f"restore after a failed switch failed: {restore_reason}")
            return SwitchOutcome(None, None, SwitchFailed(self.target, reason, None))
        device.activated(old)
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
        freed = None
        if memory_before is not None and memory_after_unload is not None:
            freed = round(memory_before - memory_after_unload, 1)
        if metrics is not None and metrics.memory_before_mb is not None:
            # The host measured the device around its own unload: the figures that mean something there.
            memory_before, memory_after_unload = metrics.memory_before_mb, metrics.memory_after_unload_mb
            freed = metrics.freed_memory_mb
        return SwitchReport(
            previous_model=self.previous.model if self.previous else None,
            current_model=self.target,
            switched=True,
            duration_ms=round((time.perf_counter() - started) * 1000.0, 1),
            reconfigure_ms=round(
                metrics.reconfigure_ms if metrics and metrics.reconfigure_ms is not None else reconfigure_ms,
                1,
            ),
            memory_before_mb=memory_before,
            memory_after_unload_mb=memory_after_unload,
            freed_memory_mb=freed,
            stash_memory_after_mb=metrics.stash_memory_after_mb if metrics else None,
            drain_ms=round(drain_ms, 1),
            aborted_requests=aborted,
            strategy=self.strategy_name,
            method=metrics.method if metrics else None,
            unload_ms=_rounded(metrics.unload_ms if metrics else None),
            load_ms=_rounded(metrics.load_ms if metrics else None),
            kv_cache_ms=_rounded(metrics.kv_cache_ms if metrics else None),
            frontend_ms=_rounded(metrics.frontend_ms if metrics else None),
            kept_blocks=metrics.kept_blocks if metrics else None,
            kept_bytes=metrics.kept_bytes if metrics else None,
            keep_ms=_rounded(metrics.keep_ms if metrics else None),
            engine_start=metrics.engine_start if metrics else None,
        )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _switched(previous: str | None, current: str) -> str:
    """``switched a -> b``, or ``loaded b`` when no model was active (at start-up, after a forced unload)."""
    return f"loaded {current}" if previous is None else f"switched {previous} -> {current}"
