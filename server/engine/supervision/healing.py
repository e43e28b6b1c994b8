"""Bringing a model back after its engine died, and the restart plan every status surface shows.

Manual mode restarts the model that was active at once, then with the failure backoff
(``failure_backoff_s x 2^(n-1)``, capped: :meth:`SchedulerPolicy.backoff_s`), at most ``switching.max_restarts``
times; then it stays failed until an admin switch or a reload asks again. An engine that dies again within
:data:`STABLE_AFTER_S` of a restart that brought it back did not really come back (a crash loop: a bad request
replayed, a leak that kills it at once): its count goes on, with the backoff, instead of starting again, so such a
model also stops after ``max_restarts``. Auto mode leaves it to the scheduler:
the model comes back for its waiters or its next request, after the scheduler's own backoff when a restart
failed. Either way :meth:`Healer.plan` says what comes next, computed here, where the backoff lives, so that
``/v1/models``, ``/admin/status``, ``turnout status`` and the status page show one plan.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from server.engine.types import ManagerClosed, RestartPlan, SchedulerPolicy, SwitchConflict, SwitchFailed
from server.profiles.schema import Switching

__all__ = ["GIVEN_UP", "STABLE_AFTER_S", "Healer"]

logger = logging.getLogger("turnout.engine")

#: The plan's note once no restart will come by itself.
GIVEN_UP = "stays failed until a switch or reload"
#: How long a restarted engine must live for its restart count to start again at its next death. A minute is
#: well past any crash caused by the start itself, and well short of a real server's time between faults.
STABLE_AFTER_S = 60.0


class Healer:
    """Restarts the active model after its engine died (manual mode), and keeps the restart bookkeeping, all of it:
    which models are dead (their engine died and they have not served since), and each one's restart count.

    Args:
        switching: The profile's switching section (``max_restarts``).
        policy: The mode and the failure backoff (the manager's one :class:`SchedulerPolicy`).
        restart: Switches to a model as a restart (raises :class:`SwitchFailed` when it fails).
        taken_over: True once something else holds the device (a switch, another active model, shutdown): the
            restarts stop then.
        clock: ``time.monotonic`` (tests pass their own).
    """

    def __init__(
        self,
        switching: Switching,
        policy: SchedulerPolicy,
        restart: Callable[[str], Awaitable[object]],
        taken_over: Callable[[], bool],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._max = switching.max_restarts
        self._backoff = policy.backoff_s
        self._restart = restart
        self._taken_over = taken_over
        self._clock = clock
        self._dead: set[str] = set()
        self._restarts: dict[str, int] = {}
        self._back_at: dict[str, float] = {}  # when a restart last brought the model back
        self._task: asyncio.Task[None] | None = None
        self._healing: str | None = None
        self._next_at: float | None = None

    def died(self, name: str, *, was_active: bool) -> None:
        """``name``'s engine died: its restart count starts again (unless a restart brought it back less than
        :data:`STABLE_AFTER_S` ago), and in manual mode, when it was the active model, its restarts begin."""
        self._dead.add(name)
        back_at = self._back_at.pop(name, None)
        if back_at is None or self._clock() - back_at >= STABLE_AFTER_S:
            self._restarts[name] = 0
        else:
            logger.warning(
                "%s's engine died %.0f s after a restart brought it back: its restart count stays at %d of %d",
                name,
                self._clock() - back_at,
                self._restarts.get(name, 0),
                self._max,
            )
        if not was_active or self._policy.auto or self._task is not None:
            return
        if self._restarts.get(name, 0) >= self._max:
            logger.error("%s's engine died after %d restarts (max_restarts); it %s", name, self._max, GIVEN_UP)
            return
        self._healing, self._next_at = name, None
        self._task = asyncio.get_running_loop().create_task(self._heal(name), name=f"heal {name}")
        self._task.add_done_callback(self._healed)

    def is_dead(self, name: str) -> bool:
        """Whether ``name``'s engine died and it has not served since (its next activation is a restart)."""
        return name in self._dead

    def keep_only(self, models: Collection[str]) -> None:
        """A reload left only ``models``: forget the others (a model added again later starts afresh)."""
        self._dead &= set(models)
        self._restarts = {name: count for name, count in self._restarts.items() if name in models}

    def restart_began(self, name: str) -> None:
        """A switch to the dead ``name`` began (its own restart, the scheduler's or an admin's): one more try."""
        self._restarts[name] = self._restarts.get(name, 0) + 1

    def restart_ended(self, name: str, *, ok: bool) -> None:
        """A switch that restarted ``name`` ended; when ``ok``, the model serves again from now."""
        if ok:
            self._dead.discard(name)
            self._back_at[name] = self._clock()

    def cancel(self) -> None:
        """Stop restarting (shutdown)."""
        if self._task is not None:
            self._task.cancel()

    def plan(self, name: str, *, restarting: bool, retry_in_s: float | None) -> RestartPlan | None:
        """What comes next for ``name`` (None unless its engine died and it has not served since).

        Args:
            name: The model.
            restarting: A switch to it is under way.
            retry_in_s: Auto mode: the scheduler's backoff after a failed restart, if any.
        """
        if name not in self._dead:
            return None
        tried = self._restarts.get(name, 0)
        if self._policy.auto:
            wait = f", not before {retry_in_s:.0f} s" if retry_in_s is not None else ""
            note = "restarting" if restarting else f"restarts at its next request{wait}"
            return RestartPlan(restarts=tried, restarting=restarting, next_restart_in_s=retry_in_s, note=note)
        if restarting:
            return RestartPlan(
                restarts=tried, max_restarts=self._max, restarting=True, note=f"restarting ({tried} of {self._max})"
            )
        if self._healing == name and self._task is not None and not self._taken_over():
            next_at = self._next_at
            in_s = None if next_at is None else round(max(next_at - self._clock(), 0.0), 1)
            when = "now" if in_s is None else f"in {in_s:.0f} s"
            return RestartPlan(
                restarts=tried,
                max_restarts=self._max,
                next_restart_in_s=in_s,
                note=f"restart {tried + 1} of {self._max} {when}",
            )
        return RestartPlan(restarts=tried, max_restarts=self._max, note=GIVEN_UP, given_up=True)

    async def _heal(self, name: str) -> None:
        # A crash loop's count goes on (see died): its next restart waits for the backoff its count has reached.
        for attempt in range(self._restarts.get(name, 0), self._max):
            if attempt:
                delay = self._backoff(attempt)
                logger.warning("restarting %s in %.0f s (attempt %d of %d)", name, delay, attempt + 1, self._max)
                self._next_at = self._clock() + delay
                await asyncio.sleep(delay)
                self._next_at = None
            if self._taken_over():
                return  # an admin switch or a reload took over
            try:
                await self._restart(name)
                return
            except (SwitchFailed, SwitchConflict, ManagerClosed) as exc:
                logger.error("restarting %s failed: %s", name, exc)
        logger.error("%s failed %d restarts; it %s", name, self._max, GIVEN_UP)

    def _healed(self, task: asyncio.Task[None]) -> None:
        self._task, self._next_at = None, None
        if not task.cancelled() and task.exception() is not None:
            logger.error("healing ended with %r", task.exception())
