"""A switch as the manager runs it: a task that the model slots record as the switch under way, and what happens when
it ends, however it ends: its outcome published on the model slots (whose change signal tells the scheduler, which may
start the next switch), its attempt in the switch history, the healing and the observers told of a restart.

The steps of one switch (drain, park, bring up, roll back) are ``switch.py``'s :class:`SwitchRun`; when a switch
starts, and whether a request joins it, is the manager's and the admission's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from server.engine.supervision import Healer
from server.engine.switching.history import SwitchHistory
from server.engine.switching.model_slots import ModelSlots, SwitchUnderWay
from server.engine.switching.switch import SwitchRun
from server.engine.switching.verification import ModelProof
from server.engine.types import CostBook, Observers, SwitchAttempt, SwitchFailed, SwitchReport

__all__ = ["SwitchTasks"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")


class SwitchTasks(Generic[B]):
    """Starts one manager's switches and closes each when it ends.

    Args:
        slots: Records the switch under way, runs its steps and publishes its outcome.
        strategy_name: The strategy's name, for the report and the history.
        history: Keeps each attempt and the last report.
        observers: Told of a restart's outcome.
        healer: Told when a restart begins and how it ended.
        memory_probe: Reads memory in MB for the switch report.
        abort_grace: Seconds aborted requests get to leave before the old model is parked.
        costs: Counts each switch's report (what bringing its target up cost).
    """

    def __init__(
        self,
        slots: ModelSlots[B],
        strategy_name: str,
        history: SwitchHistory,
        observers: Observers,
        healer: Healer,
        *,
        memory_probe: Callable[[], float],
        abort_grace: float,
        costs: CostBook,
        proof: ModelProof[B] | None = None,
    ) -> None:
        self._slots = slots
        self._strategy_name = strategy_name
        self._history = history
        self._observers = observers
        self._healer = healer
        self._memory_probe = memory_probe
        self._abort_grace = abort_grace
        self._costs = costs
        self._proof = proof

    def begin(self, target: str, drain_timeout: float, trigger: str) -> SwitchUnderWay:
        """Start the switch to ``target`` as a task, recorded on the model slots as the switch under way.

        Args:
            target: The model to activate.
            drain_timeout: Seconds the model being left gets to finish its requests.
            trigger: Why it runs (``admin``, ``auto``, ``restart``, ``startup``), for the history.
        """
        run = SwitchRun(
            slots=self._slots,
            strategy_name=self._strategy_name,
            previous=self._slots.published,
            target=target,
            memory_probe=self._memory_probe,
            abort_grace=self._abort_grace,
            proof=self._proof,
        )
        task = asyncio.get_running_loop().create_task(self._run(run, drain_timeout, trigger))
        task.add_done_callback(_retrieve_exception)  # a switch started by auto mode may have no awaiter left
        return self._slots.open_switch(target, task, forced=trigger != "auto")

    async def _run(self, run: SwitchRun[B], drain_timeout: float, trigger: str) -> SwitchReport:
        started_at, started = time.time(), time.perf_counter()
        restart = self._healer.is_dead(run.target)  # the target's engine died: this switch brings it back
        if restart:
            self._healer.restart_began(run.target)
        error: str | None = "cancelled (the server is shutting down)"
        published = run.previous
        try:
            outcome = await run.execute(drain_timeout)
            published = outcome.published
            if outcome.report is not None:
                self._history.last_report = outcome.report
                if outcome.error is None:
                    self._costs.record(outcome.report, at_startup=trigger == "startup")
            error = _failure_reason(outcome.error)
            await self._slots.unload_stale_parked()  # while the switch still holds the device
            if outcome.error is not None:
                raise outcome.error
            assert outcome.report is not None
            return outcome.report
        finally:
            ended = self._slots.close_switch(published, ok=error is None)
            self._history.record(
                SwitchAttempt(
                    source=ended.source,
                    target=ended.target,
                    trigger=trigger,
                    strategy=self._strategy_name,
                    outcome="ok" if error is None else "failed",
                    error=error,
                    restored=self._slots.active_model if error is not None else None,
                    started_at=round(started_at, 3),
                    duration_ms=round((time.perf_counter() - started) * 1000.0, 1),
                )
            )
            if restart:
                self._healer.restart_ended(ended.target, ok=error is None)
                self._observers.engine_restarted(ended.target, ok=error is None)


def _failure_reason(error: Exception | None) -> str | None:
    """The reason a switch failed, for the admin status and the log (never for other clients)."""
    if error is None:
        return None
    return error.reason if isinstance(error, SwitchFailed) else str(error)


def _retrieve_exception(task: asyncio.Task[SwitchReport]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("switch task ended with %r", task.exception())
