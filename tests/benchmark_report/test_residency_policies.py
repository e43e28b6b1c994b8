"""``benchmarks/residency_policies.py``: its synthetic traces and its side-by-side figures, on a short run."""

from __future__ import annotations

import itertools
from collections import Counter

from benchmarks.residency_policies import COLD_S, Options, page_section, run, synthetic_trace


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
    text = "\n".join(page_section(result))
    assert "| seed | requests | cost switch s |" in text and ("**Met**" in text or "**MISSED**" in text)
