"""The healer's restart count on its own: a crash loop keeps counting; an engine that lived long starts again."""

from __future__ import annotations

import asyncio

from server.engine.supervision.healing import GIVEN_UP, STABLE_AFTER_S, Healer
from server.engine.types.scheduling import SchedulerPolicy
from server.profiles.schema import Switching


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _healer(clock: _Clock, restarted: list[str]) -> Healer:
    healer: Healer

    async def restart(name: str) -> None:
        healer.restart_began(name)
        restarted.append(name)
        healer.restart_ended(name, ok=True)

    switching = Switching(max_restarts=2, failure_backoff_s=0.01)
    healer = Healer(switching, SchedulerPolicy.from_switching(switching), restart, lambda: False, clock=clock)
    return healer


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.01)


async def test_a_death_long_after_a_restart_starts_the_count_again() -> None:
    clock, restarted = _Clock(), []
    healer = await _healer(clock, restarted)
    for _ in range(4):  # each death comes long after the restart before it: each one restarts
        healer.died("a", was_active=True)
        await _settle()
        clock.now += STABLE_AFTER_S
    assert restarted == ["a"] * 4


async def test_deaths_soon_after_restarts_count_on_and_give_up() -> None:
    clock, restarted = _Clock(), []
    healer = await _healer(clock, restarted)
    for _ in range(3):  # the first death, then two that come soon after a restart brought it back
        healer.died("a", was_active=True)
        await _settle()
        clock.now += STABLE_AFTER_S - 1
    assert restarted == ["a"] * 2  # max_restarts: the third death restarts nothing
    plan = healer.plan("a", restarting=False, retry_in_s=None)
    assert plan is not None and plan.given_up and plan.note == GIVEN_UP
