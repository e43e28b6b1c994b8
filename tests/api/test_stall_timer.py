"""The stall timer: one timer per stream, firing only when a single hand-over outlives the timeout."""

from __future__ import annotations

import asyncio

from server.api.streaming.stall_timer import StallTimer


async def test_quick_hand_overs_past_the_first_due_time_never_fire_and_a_slow_one_does() -> None:
    fired: list[float] = []
    loop = asyncio.get_running_loop()

    async def on_stall() -> None:
        fired.append(loop.time())

    # A 1 s timeout: a loaded machine may hold the loop still a few tenths of a second between two hand-overs.
    timer = StallTimer(1.0, on_stall)
    start = loop.time()
    # Chunks taken at once for 2.5 s: the stream's one timer comes due twice and finds no hand-over that old.
    while loop.time() - start < 2.5:
        timer.arm()
        await asyncio.sleep(0.01)
        timer.disarm()
    assert not timer.stalled
    timer.arm()
    slow = loop.time()
    await asyncio.sleep(1.75)
    assert timer.stalled
    await asyncio.sleep(0)
    assert len(fired) == 1 and fired[0] - slow >= 1.0 - 0.01
    timer.close()


async def test_a_closed_timer_never_fires() -> None:
    async def on_stall() -> None:
        raise AssertionError("fired after close")

    timer = StallTimer(0.05, on_stall)
    timer.arm()
    timer.close()
    await asyncio.sleep(0.1)
    assert not timer.stalled
