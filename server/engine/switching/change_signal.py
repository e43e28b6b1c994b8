"""The model slots' change broadcast: how requests and switches wait for the gate to change, without a lock, and how the
scheduler hears of every change (its one change path: nothing else tells it that something changed).

Everything runs on one asyncio loop and state changes happen between awaits, so waiters only need to hear that
*something* changed and then look again. Every change sets the current event and replaces it with a fresh one,
and calls each subscriber with what changed: a :class:`Change` that carries news the state alone does not keep
(a switch began or ended and how, a request ended), or None for any other change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from server.engine.types import Change

__all__ = ["ChangeSignal", "wait_set"]


class ChangeSignal:
    """Wakes every waiter at each change and tells each subscriber; a waiter that looked at the state before a
    change never misses it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._subscribers: list[Callable[[Change], None]] = []

    def subscribe(self, subscriber: Callable[[Change], None]) -> None:
        """Call ``subscriber`` at every change from now on (synchronously: it must not await)."""
        self._subscribers.append(subscriber)

    def watch(self) -> asyncio.Event:
        """The event the next change sets. Take it *before* reading the state, so no change in between is lost."""
        return self._event

    def notify(self, change: Change = None) -> None:
        """A change happened: wake everyone waiting on the current event, then tell the subscribers."""
        event, self._event = self._event, asyncio.Event()
        event.set()
        for subscriber in list(self._subscribers):
            subscriber(change)

    async def wait(self, timeout: float) -> bool:
        """Wait for the next change, at most ``timeout`` seconds; False when it timed out."""
        return await wait_set(self._event, timeout)


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds (none when it is not positive); False when it timed out."""
    if timeout <= 0:
        return event.is_set()
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True
