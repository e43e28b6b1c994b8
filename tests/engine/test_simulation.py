"""The simulation behind ``turnout simulate``: its trace reader, and the real scheduler and residency policy on a
fake clock weighing measured reload costs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from server.engine.residency import Resident
from server.engine.simulation import (
    SimulatedModel,
    Simulation,
    TraceInvalid,
    TraceRequest,
    parse_trace,
    simulate,
    strongest_change,
)
from server.engine.types import CostBook
from server.profiles.schema import Switching
from tests.fresh_python import fresh_python


def test_a_trace_is_csv_or_json_lines_in_seconds_or_iso_times() -> None:
    csv = "timestamp,model,prompt_tokens,output_tokens\n12.5,b,10,2\n10,a,100,20\n"
    assert parse_trace(csv) == [
        TraceRequest(at=0.0, model="a", prompt_tokens=100, output_tokens=20),
        TraceRequest(at=2.5, model="b", prompt_tokens=10, output_tokens=2),
    ]
    lines = (
        '{"timestamp": "2026-12-06T10:00:00+00:00", "model": "a", "prompt_tokens": 5, "output_tokens": 1}\n\n'
        '{"timestamp": "2026-12-06T10:00:01.5+00:00", "model": "b", "prompt_tokens": 5, "output_tokens": 1}\n'
    )
    assert [(item.at, item.model) for item in parse_trace(lines)] == [(0.0, "a"), (1.5, "b")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,model\n1,a\n", "t:1: the header must be timestamp,model,prompt_tokens,output_tokens"),
        ("timestamp,model,prompt_tokens,output_tokens\nsoon,a,1,1\n", "t:2: timestamp 'soon' is neither"),
        ("timestamp,model,prompt_tokens,output_tokens\n1,a,x,1\n", "t:2: prompt_tokens and output_tokens must"),
        ('{"timestamp": 1, "model": "a"}\n', "t:1: prompt_tokens, output_tokens missing"),
        ("timestamp,model,prompt_tokens,output_tokens\n", "t: no requests"),
    ],
)
def test_a_broken_trace_says_where(text: str, message: str) -> None:
    with pytest.raises(TraceInvalid) as caught:
        parse_trace(text, name="t")
    assert str(caught.value).startswith(message)


def _rounds(models: str, rounds: int, gap_s: float = 20.0) -> list[TraceRequest]:
    """One request for each of ``models`` in turn, ``gap_s`` apart."""
    names = list(models) * rounds
    return [TraceRequest(at=i * gap_s, model=name, prompt_tokens=100, output_tokens=30) for i, name in enumerate(names)]


def _setup(**fields: object) -> Simulation:
    book = CostBook()
    for name, cold in {"dear": 30.0, "x": 0.5, "y": 0.5}.items():
        book.add(name, "cold", cold)
        book.add(name, "warm", 0.05)
    models = {name: SimulatedModel(footprint_bytes=1 << 30) for name in ("dear", "x", "y")}
    defaults: dict[str, object] = {
        "models": models,
        "switching": Switching(mode="auto", max_active=2, max_wait_s=120.0),
        "holds_several": True,
        "costs": book,
    }
    return Simulation(**{**defaults, **fields})  # type: ignore[arg-type]


def test_eviction_by_cost_keeps_the_dear_model_that_lru_reloads_every_round() -> None:
    trace = _rounds(("dear", "x", "y"), rounds=10)
    setup = _setup()
    cost, lru = simulate(setup.with_eviction("cost"), trace), simulate(setup.with_eviction("lru"), trace)
    assert cost.overall.requests == lru.overall.requests == 30
    # lru: two residents for three models in turn, so every model comes back cold, the dear one ten times.
    assert lru.models["dear"].switch_s >= 9 * 30.0
    # cost: the dear model stays; the cheap ones take turns in the other place.
    assert cost.models["dear"].switch_s < 1.0
    assert cost.overall.switch_s < 0.2 * lru.overall.switch_s
    assert cost.overall.wait_p99_s <= lru.overall.wait_p99_s


def test_a_pinned_model_is_never_evicted_and_the_what_if_names_the_strongest_change() -> None:
    trace = _rounds(("dear", "x", "y"), rounds=10)
    setup = _setup().with_eviction("lru")
    base = simulate(setup, trace)
    pinned = simulate(_setup(models={**setup.models, "dear": SimulatedModel(pinned=True)}).with_eviction("lru"), trace)
    # Each round switches to it; pinned, each switch is a warm one.
    assert pinned.models["dear"].switch_s < 1.0 < 9 * 30.0 <= base.models["dear"].switch_s
    change = strongest_change(setup, trace, base)
    # One more engine holds all three; pinning the dear one comes close but still reloads the cheap ones.
    assert change is not None and change.change == "max_active 3"
    assert change.outcome.overall.switch_s < pinned.overall.switch_s < base.overall.switch_s


def test_one_engine_comes_back_cold_each_switch_and_the_wait_counts_the_reload() -> None:
    trace = _rounds(("dear", "x"), rounds=3)
    outcome = simulate(_setup(holds_several=False), trace)
    assert outcome.models["x"].switches == 3 and outcome.models["dear"].switches == 2
    assert outcome.models["dear"].wait_max_s >= 30.0  # its request waited for its cold start
    assert 0 < outcome.overall.serving_share < 1


def test_the_held_model_came_up_before_the_trace_so_the_first_switch_away_starts_at_once() -> None:
    # As on a server, whose start-up ends before its traffic: the first request's wait is the reload alone, not
    # the reload after a residency the active model would owe had it come up with that request.
    first = [TraceRequest(at=0.0, model="dear", prompt_tokens=100, output_tokens=30)]
    for start in ((), ("x",)):
        setup = _setup(models={name: SimulatedModel() for name in ("x", "dear")}, start=start)
        outcome = simulate(setup, first)
        assert outcome.models["dear"].wait_max_s == pytest.approx(30.0, abs=0.01)


def test_room_is_made_before_the_reload_so_requests_queued_during_it_keep_no_cheap_model() -> None:
    # x is active, the dear model parked; y needs an engine. The device evicts before it starts y's (as keep does):
    # then x is idle and cheap, so it goes. Requests for x that arrive during y's cold start do not make x busy
    # after the fact and the dear model evicted in its place, to come back cold.
    trace = [
        TraceRequest(at=0.0, model="y", prompt_tokens=100, output_tokens=30),
        TraceRequest(at=0.2, model="x", prompt_tokens=100, output_tokens=30),
        TraceRequest(at=10.0, model="dear", prompt_tokens=100, output_tokens=30),
    ]
    outcome = simulate(_setup(start=("x", "dear")), trace)
    assert outcome.models["dear"].switches == 1
    assert outcome.models["dear"].switch_s < 1.0  # warm: it stayed
    assert outcome.models["x"].switch_s >= 0.5  # cold: it went


def test_an_offline_order_replaces_the_profiles_rule_for_benchmarks() -> None:
    # A rule that always evicts the dear model turns the cost rule's outcome into a reload of it every round; the
    # rule is asked with the time, the target and the other residents, and only idle ones may be returned.
    trace = _rounds(("dear", "x", "y"), rounds=10)
    asked: list[tuple[str, list[str]]] = []

    def dear_first(now: float, target: str, residents: Sequence[Resident]) -> list[Resident]:
        asked.append((target, sorted(item.name for item in residents)))
        return sorted((item for item in residents if item.evictable), key=lambda item: item.name != "dear")

    setup = _setup().with_eviction("cost")
    offline = simulate(replace(setup, offline_order=dear_first), trace)
    assert simulate(setup, trace).models["dear"].switch_s < 1.0
    assert offline.models["dear"].switch_s >= 9 * 30.0
    assert asked and all(target not in names and len(names) == 2 for target, names in asked)


def test_the_simulation_imports_neither_vllm_nor_ray() -> None:
    code = (
        "import sys; import server.engine.simulation, server.cli.simulate; "
        "print('vllm' in sys.modules, 'ray' in sys.modules, 'torch' in sys.modules)"
    )
    assert fresh_python(code) == "False False False"
