"""``benchmarks/residency_policies.py``: its synthetic traces and its side-by-side figures, on a short run."""

from __future__ import annotations

import itertools
from collections import Counter

from benchmarks.residency_policies import (
    COLD_S,
    SHAPES,
    Options,
    clairvoyant,
    options_of,
    page_section,
    run,
    synthetic_trace,
)
from benchmarks.run_all import STEPS
from server.engine.residency import Resident
from server.engine.simulation import TraceRequest


def test_the_traces_are_bursty_zipf_popular_and_repeatable() -> None:
    options = Options(hours=1.0)
    trace = synthetic_trace(3, options)
    assert trace == synthetic_trace(3, options) and trace != synthetic_trace(4, options)
    counts = Counter(item.model for item in trace).most_common()
    assert {name for name, _ in counts} <= set(COLD_S) and counts[0][1] > 3 * counts[-1][1]
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(trace)]
    assert sum(gap < 10 for gap in gaps) > len(gaps) / 2  # most requests come in bursts


def test_a_short_run_compares_both_rules_on_each_seed() -> None:
    result = run(Options(seeds=2, hours=0.5, first_seed=0))
    assert [row.seed for row in result.rows] == [0, 1]
    for row in result.rows:
        assert row.cost_switch_s > 0 and row.lru_switch_s > 0
        assert row.switch_ratio == round(row.cost_switch_s / row.lru_switch_s, 3)
        assert 0 < row.bound_switch_ratio < 1  # knowing the trace beats lru
    assert [row.shape for row in result.shapes] == list(SHAPES)
    text = "\n".join(page_section(result))
    assert "| seed | requests | cost switch s |" in text and ("**Met**" in text or "**MISSED**" in text)
    assert "| bound switch/lru |" in text and "| 8 models | 8 | 3 |" in text


def _asked(at: float, model: str) -> TraceRequest:
    return TraceRequest(at=at, model=model, prompt_tokens=10, output_tokens=10)


def test_the_clairvoyant_bound_evicts_what_costs_least_over_what_comes() -> None:
    cold = {"cheap": 3.0, "dear": 30.0, "next": 5.0, "target": 5.0}
    here = [Resident(name=name, last_used=0.0, return_s=cold[name]) for name in ("cheap", "dear", "next")]
    # The dear model comes back soon and the cheap one never: the cheap one goes, then the dear one last.
    order = clairvoyant([_asked(20.0, "dear"), _asked(30.0, "next")], cold, 3)
    assert next(item.name for item in order(10.0, "target", here)) == "cheap"
    # Only the cheap one comes back: the dear one goes (its reload is never paid), whatever it costs.
    order = clairvoyant([_asked(20.0, "cheap"), _asked(30.0, "next")], cold, 3)
    assert next(item.name for item in order(10.0, "target", here)) == "dear"
    # What came before ``now`` does not count; a busy resident is never offered.
    order = clairvoyant([_asked(20.0, "dear"), _asked(40.0, "cheap")], cold, 3)
    busy = [*here[:2], Resident(name="next", last_used=0.0, busy=True)]
    assert [item.name for item in order(10.0, "target", busy)] == ["cheap", "dear"]
    assert [item.name for item in order(25.0, "target", busy)] == ["dear", "cheap"]


def test_run_all_runs_it_with_a_quick_variant() -> None:
    step = next(step for step in STEPS if step.name == "residency_policies")
    start = step.full.index("benchmarks.residency_policies") + 1
    assert options_of(step.full[start:]) == Options()
    assert options_of(step.quick[start:]) == Options(seeds=2, hours=0.5)
