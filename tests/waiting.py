"""Waiting on a condition instead of sleeping a fixed time: as short as the machine allows, as long as it needs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["until"]


async def until(check: Callable[[], bool], timeout: float = 10.0, what: str = "the condition") -> None:
    """Return as soon as ``check()`` is true; fail the test when ``timeout`` seconds pass first.

    The timeout is a ceiling for a loaded 2-core machine, not a measurement: a passing test never waits it out.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"{what} was not reached within {timeout} s"
        await asyncio.sleep(0.01)
