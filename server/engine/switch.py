"""One switch, step by step: drain, abort the rest, park the old model, bring up the target, or roll back.

The manager closes the gate (by registering the switch) before a :class:`SwitchRun` starts and publishes its
outcome in one assignment after it ends, so nothing here is visible to requests half-done.

Failure handling:
    * parking the old model fails: it goes back to ``active`` when it still holds its engine; when its engine
      is gone anyway (an unload that reported an error), the switch goes on;
    * bringing up the target fails: the target is released and marked ``failed`` with the reason, and the old
      model is brought back (reloaded if the strategy had unloaded it);
    * both fail: no model is published, ``/ready`` says so, and the next switch may try again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from server.engine.errors import EngineError, RequestAbortedBySwitch, SwitchFailed
from server.engine.lease import Lease, Published
from server.engine.report import ActivationMetrics, SwitchReport
from server.engine.states import Slot, SlotState, transition
from server.engine.strategies.base import SwitchStrategy

__all__ = ["SwitchOutcome", "SwitchRun", "describe_error"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")


@dataclass(frozen=True)
class SwitchOutcome(Generic[B]):
    """What the manager publishes after a switch: the model now active (or None), the report or the error."""

    published: Published[B] | None
    report: SwitchReport | None
    error: EngineError | None


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a failed slot (never a traceback)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class SwitchRun(Generic[B]):
    """The state of one switch while it runs. Built by the manager, executed once."""

    slots: Mapping[str, Slot]
    strategy: SwitchStrategy
    previous: Published[B] | None
    target: Slot
    inflight: Mapping[str, set[Lease[B]]]
    publish: Callable[[Slot], Awaitable[Published[B]]]
    wait_change: Callable[[float], Awaitable[bool]]
    memory_probe: Callable[[], float]
    abort_grace: float

    async def execute(self, drain_timeout: float) -> SwitchOutcome[B]:
        """Run the switch; never raises an :class:`Exception`, it reports it in the outcome."""
        started = time.perf_counter()
        old = self.slots[self.previous.model] if self.previous else None
        memory_before = self._memory()
        drain_ms, aborted = 0.0, 0
        if old is not None:
            transition(old, SlotState.DRAINING)
            drain_ms, aborted = await self._drain(old, drain_timeout)
        reconfigure_started = time.perf_counter()
        if old is not None:
            try:
                await self._park(old)
            except Exception as exc:
                if old.engine is not None:
                    return self._park_failed(old, exc)
                # The engine is gone even though its shutdown reported an error: go on with the target.
                logger.error("unloading %s reported %s; continuing", old.name, describe_error(exc))
                transition(old, SlotState.STOPPED)
        memory_after_unload = self._memory()
        try:
            transition(self.target, SlotState.LOADING)
            metrics = await self.strategy.activate(self.target, list(self.slots.values()))
            published = await self.publish(self.target)
        except Exception as exc:
            return await self._roll_back(old, exc)
        transition(self.target, SlotState.ACTIVE)
        reconfigure_ms = (time.perf_counter() - reconfigure_started) * 1000.0
        report = self._report(started, reconfigure_ms, metrics, memory_before, memory_after_unload, drain_ms, aborted)
        logger.info(
            "switched %s -> %s in %.0f ms (drain %.0f ms, %d aborted, strategy %s)",
            report.previous_model,
            report.current_model,
            report.duration_ms,
            drain_ms,
            aborted,
            self.strategy.name,
        )
        return SwitchOutcome(published, report, None)

    # -- steps ----------------------------------------------------------------------------------------------

    async def _drain(self, old: Slot, timeout: float) -> tuple[float, int]:
        """Wait for the old model's requests, then abort what is left with the switch error."""
        started = time.perf_counter()
        leases = self.inflight[old.name]
        deadline = time.monotonic() + timeout
        while leases and await self.wait_change(deadline - time.monotonic()):
            pass
        left = list(leases)
        if left:
            await self._abort(old, left)
            grace_deadline = time.monotonic() + self.abort_grace
            # Let aborted requests leave before the engine goes away, so each ends with the switch error.
            while leases and await self.wait_change(grace_deadline - time.monotonic()):
                pass
        return (time.perf_counter() - started) * 1000.0, len(left)

    async def _abort(self, old: Slot, leases: list[Lease[B]]) -> None:
        logger.warning(
            "drain timeout: aborting %d request(s) on %s for the switch to %s",
            len(leases),
            old.name,
            self.target.name,
        )
        error = RequestAbortedBySwitch(old.name, self.target.name)
        results = await asyncio.gather(*(lease.abort(error) for lease in leases), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                logger.error("aborting a request on %s failed: %s", old.name, describe_error(result))

    async def _park(self, old: Slot) -> None:
        parked = await self.strategy.deactivate(old)  # a slot whose engine goes drops its bundle with it
        old.last_active = time.monotonic()
        transition(old, parked)

    def _park_failed(self, old: Slot, exc: Exception) -> SwitchOutcome[B]:
        """The old model could not be parked but still holds its engine: it stays active."""
        assert self.previous is not None
        reason = f"could not park '{old.name}': {describe_error(exc)}"
        logger.error("%s; it stays active", reason)
        transition(old, SlotState.ACTIVE)
        return SwitchOutcome(self.previous, None, SwitchFailed(self.target.name, reason, old.name))

    async def _roll_back(self, old: Slot | None, exc: Exception) -> SwitchOutcome[B]:
        reason = describe_error(exc)
        logger.error("activating %s failed: %s; rolling back", self.target.name, reason)
        await self._release_quietly(self.target)
        if self.target.state is not SlotState.FAILED:
            transition(self.target, SlotState.FAILED, reason)
        if old is None:
            return SwitchOutcome(None, None, SwitchFailed(self.target.name, reason, None))
        try:
            transition(old, SlotState.LOADING)
            await self.strategy.activate(old, list(self.slots.values()))
            restored = await self.publish(old)
        except Exception as restore_exc:
            restore_reason = describe_error(restore_exc)
            logger.error("restoring %s failed too: %s", old.name, restore_reason)
            await self._release_quietly(old)
            transition(old, SlotState.FAILED, f"restore after a failed switch failed: {restore_reason}")
            return SwitchOutcome(None, None, SwitchFailed(self.target.name, reason, None))
        transition(old, SlotState.ACTIVE)
        return SwitchOutcome(restored, None, SwitchFailed(self.target.name, reason, old.name))

    async def _release_quietly(self, slot: Slot) -> None:
        try:
            await self.strategy.release(slot)
        except Exception:
            logger.exception("releasing %s failed", slot.name)

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
        return SwitchReport(
            previous_model=self.previous.model if self.previous else None,
            current_model=self.target.name,
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
            strategy=self.strategy.name,
            method=metrics.method if metrics else None,
            unload_ms=_rounded(metrics.unload_ms if metrics else None),
            load_ms=_rounded(metrics.load_ms if metrics else None),
            kv_cache_ms=_rounded(metrics.kv_cache_ms if metrics else None),
            frontend_ms=_rounded(metrics.frontend_ms if metrics else None),
        )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
