"""Eviction by bytes: least recently used idle, unpinned residents first, and "cannot fit now" with the numbers."""

from __future__ import annotations

from server.engine.residency.room_plan import Resident, evictions_to_fit

GIB = 2**30


def resident(name: str, units: int, last_used: float, **kwargs: bool) -> Resident:
    return Resident(name=name, footprint_bytes=units * GIB, last_used=last_used, **kwargs)


def test_a_target_that_fits_beside_the_residents_evicts_nothing() -> None:
    decision = evictions_to_fit("c", 2 * GIB, [resident("a", 3, 1.0)], budget_bytes=5 * GIB)
    assert decision.fits and decision.evict == []
    assert decision.reason == "to fit c (needs 2.0 GiB, free 2.0 GiB)"


def test_the_least_recently_used_resident_that_frees_enough_goes() -> None:
    residents = [resident("a", 3, last_used=20.0), resident("b", 2, last_used=10.0)]
    decision = evictions_to_fit("c", 2 * GIB, residents, budget_bytes=5 * GIB)
    assert decision.fits and decision.evict == ["b"]
    assert decision.reason == "to fit c (needs 2.0 GiB, free 0 B)"


def test_eviction_goes_on_in_lru_order_until_enough_is_free() -> None:
    residents = [resident("new", 1, 30.0), resident("old", 1, 10.0), resident("mid", 1, 20.0)]
    decision = evictions_to_fit("big", 3 * GIB, residents, budget_bytes=4 * GIB)
    assert decision.evict == ["old", "mid"]


def test_pinned_and_busy_residents_are_never_chosen() -> None:
    residents = [
        resident("pinned", 2, 1.0, pinned=True),
        resident("busy", 2, 2.0, busy=True),
        resident("idle", 1, 3.0),
    ]
    decision = evictions_to_fit("c", 2 * GIB, residents, budget_bytes=6 * GIB)
    assert decision.fits and decision.evict == ["idle"]


def test_when_only_busy_or_pinned_residents_hold_the_room_it_cannot_fit_now() -> None:
    residents = [resident("pinned", 3, 1.0, pinned=True), resident("busy", 2, 2.0, busy=True)]
    decision = evictions_to_fit("c", 2 * GIB, residents, budget_bytes=5 * GIB)
    assert not decision.fits and decision.evict == []
    assert decision.reason == "cannot fit c now (needs 2.0 GiB, free 0 B at most; pinned, busy busy or pinned)"
    assert decision.needs_bytes == 2 * GIB and decision.free_bytes == 0


def test_a_target_larger_than_the_budget_evicts_nothing() -> None:
    decision = evictions_to_fit("huge", 9 * GIB, [resident("a", 1, 1.0)], budget_bytes=8 * GIB)
    assert not decision.fits and decision.evict == []
    assert "more than the budget" in decision.reason


def test_max_active_is_an_extra_cap_beside_the_bytes() -> None:
    residents = [resident("a", 1, 2.0), resident("b", 1, 1.0)]
    decision = evictions_to_fit("c", GIB, residents, budget_bytes=10 * GIB, max_active=2)
    assert decision.fits and decision.evict == ["b"]
