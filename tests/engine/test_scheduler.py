"""The auto-mode scheduler against a fake clock and recorded effects (no asyncio, no engines)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from server.engine.admission import scheduler as scheduler_module
from server.engine.admission.scheduler import IDLE_GAP_S, RESIDENCY_PER_SWITCH_COST, Scheduler
from server.engine.types import CostBook
from server.engine.types.scheduling import Refusal, SchedulerPolicy
from server.profiles.schema import Switching
from tests.fakes.scheduling import SchedulerRig


def test_a_request_for_the_active_model_is_admitted_at_once() -> None:
    rig = SchedulerRig()
    rig.submit("a", "r1")
    assert rig.effects.admitted_tickets() == ["r1"] and rig.effects.switches == []


def test_a_request_for_another_model_waits_and_never_starts_a_switch_while_the_active_one_is_busy() -> None:
    rig = SchedulerRig(min_residency_s=2.0)
    rig.submit("a", "busy")
    rig.submit("b", "w1")
    rig.submit("b", "w2")
    assert rig.effects.switches == [] and rig.scheduler.queue_depth("b") == 2
    rig.advance(1.0)
    assert rig.effects.switches == []


def test_an_idle_active_model_gives_the_device_up_at_once() -> None:
    rig = SchedulerRig(min_residency_s=30.0)
    rig.submit("b", "w1")
    assert rig.effects.switches == [("a", "b")]


def test_once_published_the_target_admits_its_whole_queue_before_anything_else() -> None:
    rig = SchedulerRig()
    rig.submit("b", "b1")
    rig.submit("b", "b2")
    rig.submit("a", "a-during-switch")
    rig.submit("b", "b3")
    rig.end_switch(after=0.003)
    assert rig.effects.admitted_tickets() == ["b1", "b2", "b3"]
    # The request for 'a' that came during the switch waits: 'b' now has demand and its quantum.
    assert rig.effects.switches == [("a", "b")] and rig.scheduler.queue_depth("a") == 1


def test_the_busy_active_model_yields_after_its_quantum() -> None:
    rig = SchedulerRig(min_residency_s=2.0, max_residency_s=60.0)
    rig.submit("a", "busy")
    rig.submit("b", "w1")
    rig.advance(1.99)
    assert rig.effects.switches == []
    rig.advance(0.02)
    assert rig.effects.switches == [("a", "b")]
    # New requests for the model being left queue behind the switch; they are served when it comes back.
    rig.submit("a", "late")
    assert "late" not in rig.effects.admitted_tickets() and rig.scheduler.queue_depth("a") == 1


def test_the_quantum_grows_with_the_measured_cost_of_the_switch_within_the_bounds() -> None:
    rig = SchedulerRig(min_residency_s=2.0, max_residency_s=60.0)
    assert rig.scheduler.quantum("a", "b") == 2.0  # nothing measured yet
    rig.submit("b", "w")
    rig.end_switch(after=10.0)  # a -> b took 10 s
    assert rig.scheduler.cost_estimate("a", "b") == 10.0
    assert rig.scheduler.quantum("a", "b") == pytest.approx(RESIDENCY_PER_SWITCH_COST * 10.0)
    rig.finish("b")
    rig.submit("a", "back")
    rig.advance(2.0)  # idle 'b' lingers min(estimated cost, min_residency_s) before it yields
    rig.end_switch(after=20.0)  # b -> a: 20 s, so a keeps the device up to the cap
    assert rig.scheduler.quantum("a", "b") == pytest.approx(40.0)
    assert rig.scheduler.quantum("b", "a") == 60.0
    # The estimate is a running one: a cheap switch brings it down.
    rig.finish("a")
    rig.submit("b", "again")
    rig.advance(2.0)
    rig.end_switch(after=0.0)
    assert rig.scheduler.cost_estimate("a", "b") == pytest.approx(5.0)


def test_a_cold_start_does_not_make_later_warm_swaps_look_dear() -> None:
    warm: set[str] = {"a"}
    rig = SchedulerRig(min_residency_s=1.0, max_residency_s=100.0, warm=lambda model: model in warm)
    rig.submit("b", "w")
    rig.end_switch(after=20.0)  # b was stopped: an engine start
    warm.add("b")  # kept resident from now on
    assert rig.scheduler.cost_estimate("a", "b") == 0.0  # nothing measured for a warm swap yet
    rig.finish("b")
    rig.submit("a", "x")
    rig.advance(IDLE_GAP_S)  # b waits briefly for a next request of its own before it yields
    rig.end_switch(after=0.003)
    assert rig.scheduler.cost_estimate("a", "b") == pytest.approx(0.003)  # the reverse warm swap
    warm.discard("b")  # evicted: the next visit is a cold start again
    assert rig.scheduler.cost_estimate("a", "b") == 20.0


def test_a_dear_switch_is_made_rarely() -> None:
    rig = SchedulerRig(min_residency_s=1.0, max_residency_s=100.0, max_wait_s=1000.0)
    rig.submit("b", "w")
    rig.end_switch(after=17.0)  # measured: a -> b costs 17 s
    rig.finish("b")
    rig.submit("a", "x")
    rig.advance(1.0)
    rig.end_switch(after=17.0)
    rig.submit("a", "busy")
    rig.submit("b", "w2")
    rig.advance(RESIDENCY_PER_SWITCH_COST * 17.0 - 1.0)
    assert rig.effects.switches[-1] == ("b", "a")
    rig.advance(1.5)
    assert rig.effects.switches[-1] == ("a", "b")


def test_an_idle_model_lingers_for_the_switch_cost_bounded_by_min_residency() -> None:
    rig = SchedulerRig(min_residency_s=3.0, max_residency_s=100.0, max_wait_s=1000.0)
    rig.submit("b", "w")
    rig.end_switch(after=17.0)  # a -> b costs 17 s: b lingers min(17, 3) = 3 s when idle
    rig.finish("b")
    rig.submit("a", "x")
    rig.advance(2.9)
    assert rig.effects.switches == [("a", "b")]
    rig.submit("b", "more")  # came in time: admitted at once, the linger starts over when it ends
    assert "more" in rig.effects.admitted_tickets()
    rig.advance(1.0)
    rig.finish("b")
    rig.advance(2.9)
    assert rig.effects.switches == [("a", "b")]
    rig.advance(0.2)
    assert rig.effects.switches == [("a", "b"), ("b", "a")]


def test_the_model_whose_oldest_waiter_is_oldest_goes_next() -> None:
    rig = SchedulerRig(models=("a", "b", "c"), min_residency_s=5.0)
    rig.submit("a", "busy")
    rig.submit("c", "c1")
    rig.advance(1.0)
    rig.submit("b", "b1")
    rig.submit("b", "b2")
    rig.advance(5.0)
    assert rig.effects.switches == [("a", "c")]


def test_the_active_model_yields_early_so_that_no_waiter_misses_max_wait() -> None:
    rig = SchedulerRig(min_residency_s=100.0, max_residency_s=100.0, max_wait_s=10.0)
    rig.submit("a", "busy")
    rig.submit("b", "w")
    rig.advance(8.9)
    assert rig.effects.switches == []
    rig.advance(0.2)  # 90% of max_wait_s, less the (unknown, so 0) cost of the switch
    assert rig.effects.switches == [("a", "b")]
    rig.end_switch(after=0.5)
    assert rig.effects.refused == [] and rig.effects.admitted_tickets() == ["busy", "w"]


def test_a_waiter_past_max_wait_is_refused_with_a_retry_after() -> None:
    rig = SchedulerRig(min_residency_s=1.0, max_wait_s=5.0)
    rig.submit("b", "w")  # a is idle: the switch starts at once, and takes too long
    assert rig.effects.switches == [("a", "b")]
    rig.advance(5.0)
    waiter, refusal = rig.effects.refused[0]
    assert (waiter.ticket, refusal) == ("w", Refusal.WAIT_TIMEOUT) and waiter.retry_after_s >= 1
    assert rig.scheduler.queue_depth("b") == 0


def test_a_full_queue_refuses_at_once() -> None:
    rig = SchedulerRig(max_queue=2)
    rig.submit("a", "busy")
    for ticket in ("w1", "w2", "w3"):
        rig.submit("b", ticket)
    assert rig.effects.refused_tickets() == {"w3": Refusal.QUEUE_FULL}
    assert rig.effects.refused[0][0].retry_after_s >= 1


def test_a_withdrawn_waiter_is_neither_admitted_nor_refused() -> None:
    rig = SchedulerRig()
    rig.submit("a", "busy")
    waiter = rig.submit("b", "gone")
    rig.scheduler.withdraw(waiter, rig.now)
    rig.finish("a")
    assert rig.effects.switches == [] and rig.effects.refused == []


def test_a_failed_load_backs_off_exponentially_with_a_cap_and_the_healthy_model_keeps_serving() -> None:
    rig = SchedulerRig(failure_backoff_s=5.0, max_failure_backoff_s=12.0)
    rig.submit("b", "w1")
    rig.submit("b", "w2")
    rig.end_switch(ok=False, after=1.0, restored="a")
    assert rig.effects.refused_tickets() == {"w1": Refusal.LOAD_FAILED, "w2": Refusal.LOAD_FAILED}
    assert rig.active == "a" and rig.scheduler.backoff_until("b", rig.now) == rig.now + 5.0
    # During the backoff: refused at once, no switch, and 'a' is untouched.
    switches = len(rig.effects.switches)
    rig.advance(2.0)
    rig.submit("b", "w3")
    assert rig.effects.refused_tickets()["w3"] is Refusal.LOAD_FAILED
    assert rig.effects.refused[-1][0].retry_after_s == 3
    assert len(rig.effects.switches) == switches
    rig.submit("a", "healthy")
    assert "healthy" in rig.effects.admitted_tickets()
    rig.finish("a")
    # After it: one retry, which fails again and doubles the backoff (capped at 12).
    rig.advance(3.0)
    rig.submit("b", "w4")
    assert rig.effects.switches[-1] == ("a", "b")
    rig.end_switch(ok=False, after=1.0, restored="a")
    assert rig.scheduler.backoff_until("b", rig.now) == rig.now + 10.0
    rig.advance(10.0)
    rig.submit("b", "w5")
    rig.end_switch(ok=False, after=1.0, restored="a")
    assert rig.scheduler.backoff_until("b", rig.now) == rig.now + 12.0


def test_an_admin_switch_forces_a_retry_and_a_success_clears_the_backoff() -> None:
    rig = SchedulerRig(failure_backoff_s=60.0)
    rig.submit("b", "w1")
    rig.end_switch(ok=False, restored="a")
    assert rig.scheduler.backoff_until("b", rig.now) is not None
    rig.force_switch("b")
    rig.submit("b", "queued-behind-admin")
    rig.end_switch(after=1.0)
    assert rig.scheduler.backoff_until("b", rig.now) is None
    assert "queued-behind-admin" in rig.effects.admitted_tickets()


def test_a_failed_switch_admits_the_requests_that_queued_for_the_restored_model() -> None:
    rig = SchedulerRig()
    rig.submit("b", "w")
    rig.submit("a", "a-during-switch")
    rig.end_switch(ok=False, restored="a")
    assert rig.effects.admitted_tickets() == ["a-during-switch"]


def test_close_refuses_every_waiter() -> None:
    rig = SchedulerRig()
    rig.submit("a", "busy")
    rig.submit("b", "w")
    rig.slots.closed = True  # the device is the one that knows; the scheduler hears of it as a change
    rig.scheduler.device_changed(rig.now)
    rig.submit("a", "after")
    assert rig.effects.refused_tickets() == {"w": Refusal.CLOSED, "after": Refusal.CLOSED}


def test_policy_comes_from_the_profile() -> None:
    switching = Switching(mode="auto", min_residency_s=1.0, max_residency_s=9.0, max_wait_s=30.0, max_queue=4)
    policy = SchedulerPolicy.from_switching(switching)
    assert (policy.min_residency_s, policy.max_residency_s, policy.max_wait_s, policy.max_queue) == (1, 9, 30, 4)


@pytest.mark.parametrize("seed", range(20))
def test_random_traffic_keeps_the_invariants(seed: int) -> None:
    """Random arrivals, completions, clock steps and switch outcomes, three models."""
    rng = random.Random(seed)
    max_wait = 8.0
    rig = SchedulerRig(models=("a", "b", "c"), min_residency_s=0.5, max_wait_s=max_wait, max_queue=6)
    wanted_at_start: list[int] = []
    rig.effects.on_switch = lambda target: wanted_at_start.append(rig.scheduler.queue_depth(target))
    in_flight: list[str] = []
    seen = 0
    submitted = 0
    for step in range(600):
        roll = rng.random()
        if roll < 0.45:
            submitted += 1
            rig.submit(rng.choice("abc"), f"r{step}")
        elif roll < 0.75 and in_flight:
            rig.finish(in_flight.pop(rng.randrange(len(in_flight))))
        elif roll < 0.85 and rig.switching is not None:
            rig.end_switch(ok=rng.random() < 0.85, after=rng.random(), restored=rig.active)
        else:
            rig.advance(rng.random())
        in_flight += [waiter.model for waiter in rig.effects.admitted[seen:]]
        seen = len(rig.effects.admitted)
        active = rig.active
        if rig.switching is None and active is not None:
            assert rig.scheduler.queue_depth(active) == 0
    admitted = {w.ticket for w in rig.effects.admitted}
    refused = {w.ticket for w, _ in rig.effects.refused}
    waiting = sum(rig.scheduler.queue_depth(m) for m in "abc")
    # Every request ends exactly once (or still waits within its bound).
    assert not admitted & refused and len(admitted) + len(refused) + waiting == submitted
    # No request was admitted after waiting longer than max_wait.
    waits = [t - w.enqueued_at for w, t in zip(rig.effects.admitted, rig.effects.admit_times, strict=True)]
    assert max(waits) <= max_wait
    # No switch is made for nobody: every switch had waiters for its target when it started.
    assert all(depth > 0 for depth in wanted_at_start)


def test_a_model_that_just_finished_waits_for_its_clients_next_request_even_when_switching_is_cheap() -> None:
    rig = SchedulerRig(min_residency_s=2.0)
    rig.submit("b", "w")
    rig.end_switch(after=0.003)  # a cheap, measured swap
    rig.finish("b")
    rig.submit("a", "x")
    rig.advance(IDLE_GAP_S / 2)
    assert rig.effects.switches == [("a", "b")]
    rig.submit("b", "next")  # the client came back in time: admitted, no swap
    assert "next" in rig.effects.admitted_tickets()
    rig.finish("b")
    rig.advance(IDLE_GAP_S * 1.01)
    assert rig.effects.switches == [("a", "b"), ("b", "a")]


def test_manual_mode_admits_the_active_model_and_refuses_the_others_at_once() -> None:
    rig = SchedulerRig(mode="manual")
    rig.submit("a", "ok")
    rig.submit("b", "other")
    assert rig.effects.admitted_tickets() == ["ok"] and rig.effects.refused_tickets() == {"other": Refusal.NOT_ACTIVE}
    rig.finish("a")
    rig.advance(600.0)
    assert rig.effects.switches == [], "manual mode never starts a switch"


def test_manual_mode_waits_only_for_the_target_of_the_admin_switch() -> None:
    rig = SchedulerRig(models=("a", "b", "c"), mode="manual")
    rig.force_switch("b")
    rig.submit("b", "for-target")
    rig.submit("a", "for-source")
    rig.submit("c", "for-bystander")
    assert rig.effects.refused_tickets() == {
        "for-source": Refusal.SWITCHING_AWAY,
        "for-bystander": Refusal.SWITCHING_AWAY,
    }
    rig.advance(3600.0)  # no bound of its own: the caller's timeout applies
    assert rig.scheduler.queue_depth("b") == 1
    rig.end_switch()
    assert rig.effects.admitted_tickets() == ["for-target"]


def test_manual_mode_refuses_the_waiters_of_a_failed_switch_and_never_backs_off() -> None:
    rig = SchedulerRig(mode="manual")
    rig.force_switch("b")
    rig.submit("b", "w")
    rig.end_switch(ok=False, restored="a")
    assert rig.effects.refused_tickets() == {"w": Refusal.SWITCH_FAILED}
    assert rig.scheduler.backoff_until("b", rig.now) is None


def test_manual_mode_with_nothing_active_says_so() -> None:
    rig = SchedulerRig(mode="manual", active=None)
    rig.submit("a", "w")
    assert rig.effects.refused_tickets() == {"w": Refusal.NO_ACTIVE}


def test_no_switch_starts_while_a_reload_holds_the_device() -> None:
    rig = SchedulerRig(min_residency_s=0.0)
    rig.slots.held_for_reload = True
    rig.submit("b", "w")
    rig.advance(5.0)
    assert rig.effects.switches == []
    rig.slots.held_for_reload = False
    rig.scheduler.device_changed(rig.now)
    assert rig.effects.switches == [("a", "b")]


def test_past_its_concurrency_limit_a_full_queue_refuses_with_the_limit_even_during_a_switch() -> None:
    rig = SchedulerRig(min_residency_s=1.0, max_residency_s=1.0, max_queue=1)
    rig.slots.limits["a"] = 1
    rig.submit("a", "running")
    rig.submit("a", "past-the-limit")  # waits for 'running' to end
    rig.submit("b", "b1")
    rig.advance(1.0)  # 'a' used its time: the switch to 'b' drains it while 'running' still runs
    assert rig.effects.switches == [("a", "b")] and rig.slots.in_flight("a") == 1
    rig.submit("a", "one-too-many")
    assert rig.effects.refused_tickets() == {"one-too-many": Refusal.CONCURRENCY_LIMIT}
    # Once 'a' serves under its limit, a full queue waits for the device: that is unavailability, not the limit.
    rig.finish("a")
    rig.submit("a", "after-drain")
    assert rig.effects.refused_tickets()["after-drain"] is Refusal.QUEUE_FULL


def test_the_waiting_model_with_the_lowest_priority_value_goes_next() -> None:
    rig = SchedulerRig(models=("a", "b", "c"), min_residency_s=2.0)
    rig.slots.priorities.update({"c": -1})
    rig.submit("a", "busy")
    rig.submit("b", "older")
    rig.advance(0.5)
    rig.submit("c", "important")
    rig.advance(2.0)
    assert rig.effects.switches == [("a", "c")]


IMPORTANT = ("a", "h", "k")


def _contend(rig: SchedulerRig, seconds: float) -> None:
    """Three important models that always have demand, and one request for 'l' waiting from the start."""
    count = itertools.count()
    rig.submit("a", "first")
    rig.submit("l", "patient")
    while rig.now < seconds:
        for model in IMPORTANT:
            idle = model == rig.active and rig.slots.leases[model] == 0
            if idle or (model != rig.active and rig.scheduler.queue_depth(model) == 0):
                rig.submit(model, f"{model}{next(count)}")
        if rig.slots.switch is not None:
            rig.end_switch(after=0.1)
        else:
            rig.advance(0.5)


@pytest.mark.parametrize("due_rule", [True, False])
def test_a_priority_never_makes_a_request_time_out(due_rule: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not due_rule:  # the rule switched off: the important models would pass the device among themselves
        monkeypatch.setattr(scheduler_module, "DUE_SHARE", math.inf)
    rig = SchedulerRig(models=(*IMPORTANT, "l"), min_residency_s=2.0, max_residency_s=4.0, max_wait_s=20.0)
    rig.slots.priorities.update(dict.fromkeys(IMPORTANT, -1))
    _contend(rig, 30.0)
    if due_rule:
        admitted = rig.effects.admitted_tickets()
        assert "patient" in admitted and rig.effects.admit_times[admitted.index("patient")] < 20.0
        assert "patient" not in rig.effects.refused_tickets()
    else:
        assert rig.effects.refused_tickets()["patient"] is Refusal.WAIT_TIMEOUT


def test_an_unmeasured_switch_is_estimated_from_the_reload_cost_book() -> None:
    book = CostBook()
    book.add("b", "cold", 12.0)
    book.add("b", "warm", 0.3)
    rig = SchedulerRig()
    fresh = Scheduler(SchedulerPolicy.from_switching(Switching(mode="auto")), rig.effects, rig.slots, book)
    assert fresh.cost_estimate("a", "b") == 0.3  # b is warm in the fake device
    rig.slots.warm = lambda model: False
    assert fresh.cost_estimate("a", "b") == 12.0 and fresh.cost_estimate("a", "c") == 0.0
    assert rig.scheduler.cost_estimate("a", "b") == 0.0  # no book: no evidence yet
