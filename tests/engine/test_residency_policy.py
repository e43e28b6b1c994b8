"""The residency policy (``server/engine/residency/policy.py``): table tests of its decisions, then proof that every
caller asks it: with the eviction order turned around (most recently used first), the device's room, the keep
strategy's eviction by count and by bytes and its in-place victim all choose the other model; the idle timer, the
Ray replica's capacity and ``turnout validate --plan`` read the policy's own functions too."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterable
from typing import Any

import pytest

from server.cli import plan_report
from server.cluster.replica_models import ReplicaModels
from server.engine import CostBook, SlotState
from server.engine.engine_metrics import ENGINE_METRICS
from server.engine.residency import policy as residency_policy
from server.engine.residency.policy import (
    Resident,
    eviction_order,
    evictions_to_fit,
    idle_deadline,
    idle_due,
    idle_limit,
    most_resident,
    one_more_fits,
    residency_outlook,
)
from server.engine.residency.slot_eviction import Weighing, budget_eviction
from server.engine.strategies import KeepStrategy, select_strategy
from server.engine.types import Slot
from server.profiles.footprint import Footprint
from server.profiles.schema import ModelProfile, Switching
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeLoader, fake_models
from tests.fakes.in_place import FakeInPlaceSwap
from tests.fakes.manager_views import state_of
from tests.fakes.memory_plans import budget_manager, budget_plan
from tests.waiting import until

GIB = 2**30


def resident(name: str, units: int, last_used: float, **kwargs: bool) -> Resident:
    return Resident(name=name, footprint_bytes=units * GIB, last_used=last_used, **kwargs)


def names(residents: Iterable[Resident]) -> list[str]:
    return [item.name for item in residents]


# -- which residents may go, and in what order --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("residents", "order"),
    [
        ([resident("a", 1, 3.0), resident("b", 1, 1.0), resident("c", 1, 2.0)], ["b", "c", "a"]),
        ([resident("a", 1, 1.0, pinned=True), resident("b", 1, 2.0)], ["b"]),
        ([resident("a", 1, 1.0, busy=True), resident("b", 1, 2.0)], ["b"]),
        ([resident("a", 1, 1.0, active=True), resident("b", 1, 2.0)], ["b"]),
        ([resident("a", 1, 1.0, active=True), resident("b", 1, 2.0, pinned=True)], []),
        ([resident("x", 1, 5.0), resident("y", 1, 5.0)], ["x", "y"]),  # equals keep the order given
        ([], []),
    ],
)
def test_the_idle_unpinned_residents_go_least_recently_used_first(residents: list[Resident], order: list[str]) -> None:
    assert names(eviction_order(residents)) == order


@pytest.mark.parametrize(
    ("held", "max_active", "fits"), [(0, 1, True), (1, 1, False), (1, 2, True), (2, 2, False), (99, None, True)]
)
def test_one_more_engine_fits_within_max_active(held: int, max_active: int | None, fits: bool) -> None:
    assert one_more_fits(held, max_active=max_active) is fits


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


def test_pinned_busy_and_active_residents_are_never_chosen() -> None:
    residents = [
        resident("pinned", 2, 1.0, pinned=True),
        resident("busy", 2, 2.0, busy=True),
        resident("active", 1, 0.5, active=True),
        resident("idle", 1, 3.0),
    ]
    decision = evictions_to_fit("c", 2 * GIB, residents, budget_bytes=7 * GIB)
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


# -- how many models fit together ---------------------------------------------------------------------------------


def sized(name: str, size: int) -> Footprint:
    """A model of ``size`` bytes in all (weights only, for simple sums)."""
    return Footprint(
        model=name,
        weight_bytes=size,
        kv_cache_bytes=0,
        kv_source="need",
        overhead_bytes=0,
        kv_bytes_per_token=0,
        max_model_len=1,
        max_num_seqs=1,
    )


def unit(name: str, units: int) -> Footprint:
    """A model of ``units`` GiB in all."""
    return sized(name, units * GIB)


def test_the_issues_card_holds_the_three_small_models_together() -> None:
    models = [unit("40", 40), unit("30", 30), unit("8a", 8), unit("8b", 8)]
    outlook = residency_outlook(models, 80 * GIB)
    assert outlook.largest_sets[0] == ["40", "30", "8a"]  # 78 GiB: the largest sets first, heaviest first
    assert ["30", "8a", "8b"] in outlook.largest_sets and ["40", "8a", "8b"] in outlook.largest_sets
    assert all(sum(int(n.rstrip("ab")) for n in combo) <= 80 for combo in outlook.largest_sets)
    assert outlook.never_fit == []


def test_sets_are_maximal_and_max_active_caps_them() -> None:
    models = [unit("a", 3), unit("b", 2), unit("c", 2)]
    assert residency_outlook(models, 5 * GIB).largest_sets == [["a", "b"], ["a", "c"], ["b", "c"]]
    assert residency_outlook(models, 7 * GIB, max_active=2).largest_sets == [["a", "b"], ["a", "c"], ["b", "c"]]
    assert residency_outlook(models, 7 * GIB).largest_sets == [["a", "b", "c"]]


def test_a_model_larger_than_the_budget_never_fits() -> None:
    outlook = residency_outlook([unit("big", 9), unit("small", 1)], 8 * GIB)
    assert outlook.never_fit == ["big"] and outlook.largest_sets == [["small"]]


def test_the_most_models_that_fit_is_the_smallest_first_within_max_active() -> None:
    sizes = {"a": 3 * GIB, "b": 2 * GIB, "c": 2 * GIB}
    assert most_resident(sizes, 5 * GIB) == ["b", "c"]
    assert most_resident(sizes, 5 * GIB, max_active=1) == ["b"]
    assert most_resident(sizes, 7 * GIB) == ["b", "c", "a"]
    assert most_resident({"x": 1, "y": 1, "z": 1, "big": 4}, 5) == ["x", "y", "z"]  # though big and one fit too
    assert most_resident({"big": 9 * GIB}, 8 * GIB) == []


def test_no_set_that_fits_has_more_models_than_the_largest_sets_say() -> None:
    rng = random.Random(30)
    for _ in range(200):
        models = [f"m{i}" for i in range(rng.randint(1, 7))]
        sizes = {name: rng.randint(1, 9) for name in models}
        budget, cap = rng.randint(1, 20), rng.choice([None, 1, 2, 3])
        most = max(
            (
                len(combo)
                for n in range(len(models) + 1)
                for combo in itertools.combinations(models, n)
                if sum(sizes[m] for m in combo) <= budget and (cap is None or len(combo) <= cap)
            ),
        )
        assert len(most_resident(sizes, budget, max_active=cap)) == most, (sizes, budget, cap)
        outlook = residency_outlook([sized(n, s) for n, s in sizes.items()], budget, max_active=cap)
        assert max((len(combo) for combo in outlook.largest_sets), default=0) == most


# -- idle deadlines -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("own", "default", "pinned", "limit"),
    [(5.0, 60.0, False, 5.0), (None, 60.0, False, 60.0), (None, None, False, None), (5.0, 60.0, True, None)],
)
def test_the_idle_limit_is_the_models_own_else_the_default_and_never_when_pinned(
    own: float | None, default: float | None, pinned: bool, limit: float | None
) -> None:
    assert idle_limit(own, default, pinned=pinned) == limit


def idle(last_used: float = 100.0, limit: float | None = 10.0, **kwargs: bool) -> Resident:
    return Resident(name="m", last_used=last_used, idle_unload_s=limit, **kwargs)


@pytest.mark.parametrize(
    ("item", "unload_active", "not_before", "deadline"),
    [
        (idle(), False, 0.0, 110.0),  # a parked model: its last use plus its limit
        (idle(limit=None), False, 0.0, None),  # no limit: never
        (idle(pinned=True), False, 0.0, None),
        (idle(busy=True), True, 0.0, None),  # requests in flight or queued, a switch holding it
        (idle(active=True), False, 0.0, None),  # manual mode: the active model never times out
        (idle(active=True), True, 0.0, 110.0),  # auto mode: it does, once idle
        (idle(), False, 130.0, 130.0),  # a failed unload retries no earlier than then
        (idle(), False, 50.0, 110.0),
    ],
)
def test_idle_deadlines(item: Resident, unload_active: bool, not_before: float, deadline: float | None) -> None:
    assert idle_deadline(item, unload_active=unload_active, not_before=not_before) == deadline


@pytest.mark.parametrize(("now", "due"), [(109.9, False), (110.0, True), (500.0, True)])
def test_a_model_is_due_at_its_deadline(now: float, due: bool) -> None:
    assert idle_due(idle(), now, unload_active=False) is due
    assert idle_due(idle(limit=None), now, unload_active=False) is False


# -- every caller asks the policy ---------------------------------------------------------------------------------


@pytest.fixture
def most_recent_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The eviction order turned around: the most recently used idle, unpinned resident goes first."""

    def reversed_order(residents: Iterable[Resident], **_: Any) -> list[Resident]:
        return sorted((item for item in residents if item.evictable), key=lambda item: -item.last_used)

    monkeypatch.setattr(residency_policy, "eviction_order", reversed_order)


@pytest.mark.parametrize("order", ["lru", "mru"])
async def test_the_device_room_and_keeps_count_eviction_follow_the_policys_order(
    make_manager: MakeManager, loader: FakeLoader, request: pytest.FixtureRequest, order: str
) -> None:
    if order == "mru":
        request.getfixturevalue("most_recent_first")
    # lru: under cost the fake loads' measured times would weigh in, and those vary with the machine's load
    manager = make_manager(KeepStrategy(loader, max_resident=2), switching=Switching(eviction="lru"))
    await manager.initialize("a")
    await manager.switch("b")  # a resident
    await manager.switch("a")  # b resident, then a parked as the switch to c begins: a is the most recent
    await manager.switch("c")
    assert loader.unloads == (["b"] if order == "lru" else ["a"])


@pytest.mark.usefixtures("most_recent_first")
async def test_keeps_load_beside_the_active_model_follows_the_policys_order(
    make_manager: MakeManager, loader: FakeLoader
) -> None:
    manager = make_manager(KeepStrategy(loader, max_resident=3), models=fake_models("a", "b", "c", "d"))
    await manager.initialize("a")
    await manager.load("b")
    await manager.load("c")
    await manager.load("d")  # three engines held: c, the most recent resident, goes (LRU: b)
    assert loader.unloads == ["c"]
    assert state_of(manager, "b") is SlotState.RESIDENT and state_of(manager, "d") is SlotState.RESIDENT


@pytest.mark.usefixtures("most_recent_first")
async def test_keeps_eviction_by_bytes_follows_the_policys_order(make_manager: MakeManager, loader: FakeLoader) -> None:
    plan = budget_plan({"a": 3 * GIB, "b": 2 * GIB, "c": 2 * GIB}, 5 * GIB)
    manager = make_manager(KeepStrategy(loader, by_bytes=budget_eviction(lambda: plan)))
    await manager.initialize("a")
    await manager.switch("b")
    await manager.switch("c")  # 3 + 2 + 2 do not fit in 5: b, the most recent, frees enough (LRU: a)
    assert loader.unloads == ["b"]
    reasons = {s.name: s.reason for s in manager.snapshot().slots}
    assert reasons == {"a": None, "b": "evicted to fit c (needs 2.0 GiB, free 0 B)", "c": None}


@pytest.mark.usefixtures("most_recent_first")
async def test_the_in_place_victim_follows_the_policys_order(make_manager: MakeManager, loader: FakeLoader) -> None:
    swap = FakeInPlaceSwap()
    room = {"another": True}
    strategy = select_strategy(
        Switching(strategy="auto"), loader, device="cpu", memory_allows=lambda: room["another"], in_place=swap
    )
    manager = make_manager(strategy)
    await manager.initialize("a")
    await manager.switch("b")  # a resident
    room["another"] = False
    report = await manager.switch("c")  # b, parked just now, is the most recent: its engine takes c (LRU: a's)
    assert report.method == "reconfigure" and swap.unloads == ["b"] and swap.loads == ["c"]
    assert state_of(manager, "a") is SlotState.RESIDENT and state_of(manager, "b") is SlotState.STOPPED


async def test_the_idle_timer_asks_the_policy(
    make_manager: MakeManager, loader: FakeLoader, monkeypatch: pytest.MonkeyPatch
) -> None:
    def short(own_s: float | None, default_s: float | None, *, pinned: bool) -> float | None:
        return None if own_s is None else 0.05  # the profile says an hour: the policy says otherwise

    monkeypatch.setattr(residency_policy, "idle_limit", short)
    models = fake_models("a", "b", "c")
    models["b"] = ModelProfile(model="/models/b", idle_unload_s=3600.0)
    manager = make_manager(KeepStrategy(loader), models=models)
    await manager.initialize("a")
    await manager.load("b")
    await until(lambda: state_of(manager, "b") is SlotState.STOPPED)
    assert loader.unloads == ["b"]


def test_the_ray_replicas_capacity_asks_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    manager: Any = budget_manager()  # a, b, c of 3, 2 and 2 GiB in 5 GiB: two fit together
    assert ReplicaModels(manager).capacity == 2

    def everything(sizes: dict[str, int], budget: int, *, max_active: int | None = None) -> list[str]:
        return list(sizes)

    monkeypatch.setattr(residency_policy, "most_resident", everything)
    assert ReplicaModels(manager).capacity == 3


def test_validate_plan_reads_the_policys_outlook() -> None:
    assert plan_report.residency_outlook is residency_policy.residency_outlook


# -- eviction by value (switching.eviction: cost) and priorities -------------------------------------------------


def _idle(name: str, last_used: float, **fields: Any) -> Resident:
    return Resident(name=name, last_used=last_used, **fields)


def test_cost_evicts_the_cheap_to_reload_model_before_a_dear_one_used_longer_ago() -> None:
    cheap = _idle("cheap", 90.0, return_s=0.1)
    dear = _idle("dear", 60.0, return_s=30.0)
    assert [r.name for r in eviction_order([dear, cheap], rule="cost", now=100.0)] == ["cheap", "dear"]
    assert [r.name for r in eviction_order([dear, cheap], rule="lru", now=100.0)] == ["dear", "cheap"]
    # A model twice as dear that sat idle 1,110 times longer goes after all (1,024 times halves the value); 910
    # times longer, it stays.
    half = _idle("half", 90.0, return_s=0.5)
    assert eviction_order([_idle("twice", -11_000.0, return_s=1.0), half], rule="cost", now=100.0)[0].name == "twice"
    assert eviction_order([_idle("twice", -9_000.0, return_s=1.0), half], rule="cost", now=100.0)[0].name == "half"


def test_reloads_cheaper_than_a_tenth_of_a_second_cost_alike_so_recency_decides() -> None:
    # A millisecond of timing noise between two in-place swaps is no reason to keep one and not the other.
    older = _idle("older", 40.0, return_s=0.002)
    newer = _idle("newer", 90.0, return_s=0.0)
    assert [r.name for r in eviction_order([newer, older], rule="cost", now=100.0)] == ["older", "newer"]
    assert residency_policy.keep_value(newer, now=100.0) == pytest.approx(0.1 / 10**0.1)
    dear = _idle("dear", 40.0, return_s=0.2)  # above the floor, the cost counts again
    assert eviction_order([newer, dear], rule="cost", now=100.0)[0].name == "newer"


def test_a_warm_prefix_cache_the_engine_would_lose_adds_to_its_cost() -> None:
    # Equal reloads: the one whose prefix cache saves each request 2 s of prefill is the dearer loss, though it
    # sat idle longer; the same cache kept in the pool (lost_prefix_s 0) leaves recency to decide.
    warm = _idle("warm", 40.0, return_s=1.0, lost_prefix_s=2.0)
    cold = _idle("cold", 90.0, return_s=1.0)
    assert [r.name for r in eviction_order([warm, cold], rule="cost", now=100.0)] == ["cold", "warm"]
    assert residency_policy.keep_value(warm, now=100.0) == pytest.approx(3.0 / 60**0.1)
    kept = _idle("warm", 40.0, return_s=1.0)
    assert [r.name for r in eviction_order([kept, cold], rule="cost", now=100.0)] == ["warm", "cold"]
    assert [r.name for r in eviction_order([warm, cold], rule="lru", now=100.0)] == ["warm", "cold"]


def test_the_devices_slots_are_weighed_with_the_prefix_their_engines_would_lose() -> None:
    engines = {"a": object(), "b": object()}
    saved = {id(engines["a"]): 0.0, id(engines["b"]): 5.0}

    def slot(name: str, last_active: float) -> Slot:
        return Slot(
            name,
            ModelProfile(model=f"/m/{name}"),
            _state=SlotState.RESIDENT,
            _last_active=last_active,
            _uses=2,
            _engine=engines[name],
        )

    plan = budget_plan({"a": 2 * GIB, "b": 2 * GIB, "c": 2 * GIB}, 4 * GIB)
    now = time.monotonic()
    holders = [slot("a", now - 10.0), slot("b", now - 100.0)]  # b is older, but its cache saves 5 s a request
    weighed = Weighing("cost", None, lambda engine: saved[id(engine)])
    assert budget_eviction(lambda: plan, weighed)("c", holders).evict == ["a"]
    assert budget_eviction(lambda: plan, Weighing("cost"))("c", holders).evict == ["b"]
    # Where the kept-KV pool keeps an engine's prefix blocks when it goes, nothing is lost with it.
    assert Weighing.of(Switching(kv_keep_bytes=GIB), None).saved_prefill_s is None
    assert Weighing.of(Switching(), None).saved_prefill_s == ENGINE_METRICS.saved_prefill_s


def test_cost_weighs_bytes_and_uses_up_to_the_cap() -> None:
    small = _idle("small", 50.0, return_s=4.0, footprint_bytes=1 << 30)
    large = _idle("large", 50.0, return_s=4.0, footprint_bytes=8 << 30)
    assert [r.name for r in eviction_order([small, large], rule="cost", now=100.0)] == ["large", "small"]
    once = _idle("once", 50.0, return_s=4.0, uses=1)
    often = _idle("often", 50.0, return_s=4.0, uses=2)
    very = _idle("very", 50.0, return_s=4.0, uses=50)
    assert eviction_order([often, once], rule="cost", now=100.0)[0].name == "once"
    assert residency_policy.keep_value(very, now=100.0) == residency_policy.keep_value(often, now=100.0)


def test_cost_without_measurements_is_least_recently_used_and_an_unmeasured_model_counts_the_mean() -> None:
    residents = [_idle("new", 80.0), _idle("old", 20.0), _idle("mid", 50.0)]
    assert [r.name for r in eviction_order(residents, rule="cost", now=100.0)] == ["old", "mid", "new"]
    measured = [_idle("a", 50.0, return_s=1.0), _idle("b", 50.0, return_s=9.0), _idle("unmeasured", 50.0)]
    assert [r.name for r in eviction_order(measured, rule="cost", now=100.0)] == ["a", "unmeasured", "b"]


@pytest.mark.parametrize("rule", ["cost", "lru"])
def test_a_higher_priority_value_is_evicted_first_and_held_models_never(rule: Any) -> None:
    important = _idle("important", 10.0, priority=-1, return_s=0.1)
    usual = _idle("usual", 90.0, return_s=30.0)
    held = [_idle("pinned", 0.0, pinned=True), _idle("busy", 0.0, busy=True), _idle("active", 0.0, active=True)]
    order = eviction_order([important, usual, *held], rule=rule, now=100.0)
    assert [r.name for r in order] == ["usual", "important"]
    decision = evictions_to_fit("t", 1, [important, usual, *held], budget_bytes=0, rule=rule, now=100.0)
    assert decision.fits is False  # every evictable one goes and held ones stay: still no room


@pytest.mark.parametrize("rule", ["cost", "lru"])
async def test_the_managers_keep_evicts_by_the_measured_costs_under_the_cost_rule(
    make_manager: MakeManager, loader: FakeLoader, rule: Any
) -> None:
    costs = CostBook()
    costs.add("a", "cold", 0.5)
    costs.add("b", "cold", 60.0)  # b comes back dear: cost keeps it though a was used more recently
    manager = make_manager(KeepStrategy(loader, max_resident=2), switching=Switching(eviction=rule), costs=costs)
    await manager.initialize("a")
    await manager.switch("b")
    await manager.switch("a")
    await manager.switch("c")  # a (parked last, cheap) or b (parked before it, dear) must go
    assert loader.unloads == (["a"] if rule == "cost" else ["b"])
