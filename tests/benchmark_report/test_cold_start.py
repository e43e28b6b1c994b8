"""The cold-start benchmark's arithmetic: paired ratios against the goals, the phases read from any report, the
printed table and the page section (no servers)."""

from __future__ import annotations

import pytest

from benchmarks.cold_start_results import (
    ColdStart,
    ColdStartConfig,
    ColdStartRound,
    TurnoutColdRound,
    judge,
    page_section,
    report_phases,
    table_lines,
)


def _vllm(ready_s: float) -> ColdStartRound:
    return ColdStartRound(ready_s=ready_s, first_token_s=0.05, total_s=ready_s + 0.05, shutdown_s=0.4)


def _turnout(ready_s: float, switch_s: float, report: dict[str, object] | None = None) -> TurnoutColdRound:
    return TurnoutColdRound(
        ready_s=ready_s,
        first_token_s=0.03,
        switch_s=switch_s - 0.02,
        switch_first_token_s=switch_s,
        shutdown_s=0.5,
        first="vllm",
        switch_report=report or {"duration_ms": switch_s * 1000, "load_ms": None, "method": "restart"},
        start_report={"duration_ms": ready_s * 500},
    )


def _result(label: str = "before") -> ColdStart:
    # Round 2 is an outlier on both sides (a busy machine): the medians of three rounds leave it out.
    vllm_rows = [_vllm(40.0), _vllm(80.0), _vllm(36.0)]
    turnout_rows = [_turnout(44.0, 10.0), _turnout(90.0, 30.0), _turnout(30.0, 8.0)]
    vllm, turnout, goals = judge(vllm_rows, turnout_rows)
    config = ColdStartConfig(rounds=3, model="plain", label=label, command="python -m vllm...", start_model="tools")
    return ColdStart(
        config=config, rounds=vllm_rows, medians=vllm, turnout=turnout_rows, turnout_medians=turnout, goals=goals
    )


def test_the_goal_ratios_divide_the_medians_and_keep_each_rounds_pair() -> None:
    data = _result()

    switch, start = data.goals
    assert data.medians.total_s == pytest.approx(40.05)
    assert switch.ratio == pytest.approx(10.0 / 40.05, abs=1e-4)
    assert (switch.goal, switch.met) == (0.25, True)  # 0.2497 <= 0.25
    assert start.ratio == pytest.approx(44.0 / 40.0)
    assert (start.goal, start.met) == (1.0, False)
    assert start.per_round == [pytest.approx(1.1), pytest.approx(90 / 80), pytest.approx(30 / 36, abs=1e-4)]


def test_phases_are_read_from_any_ms_field_and_any_field_named_phase() -> None:
    report = {
        "duration_ms": 9000.0,
        "drain_ms": 0.0,
        "load_ms": None,
        "aborted_requests": 0,
        "method": "restart",
        "switched": True,
        "start_phases": {"launch_ms": 120.0, "weights_ms": 3.0},
        "phases": [{"name": "kv_cache", "ms": 40.0}, {"name": "warmup", "ms": 7, "calls": 2, "note": "x"}],
        "engine_start": {"fork_ms": 900.0, "pid": 4242},
    }

    assert report_phases(report) == {
        "duration_ms": 9000.0,
        "drain_ms": 0.0,
        "start_phases.launch_ms": 120.0,
        "start_phases.weights_ms": 3.0,
        "phases.kv_cache": 40.0,
        "phases.warmup.ms": 7.0,
        "phases.warmup.calls": 2.0,
        "engine_start.fork_ms": 900.0,
    }
    assert report_phases(None) == {}


def test_the_table_and_the_page_show_both_ratios_against_their_goals() -> None:
    data = _result()

    printed = "\n".join(table_lines(data))
    page = "\n".join(page_section(data, None))

    assert "stop switch to first token / vLLM cold start to first token: 0.250x (goal <= 0.25x: met)" in printed
    assert "Turnout start to /ready / vLLM start to /health: 1.100x (goal <= 1.0x: NOT met)" in printed
    assert "switch report (median ms): duration_ms 10000" in printed
    assert "| before (engines spawned) |" in page
    assert "| 40.00 | 40.05 | 44.00 | 9.98 | 10.00 | 0.250x (met) | 1.100x (MISSED) |" in page
    assert '"after" row comes from' in page, "the page says where the missing run comes from"
    assert "| switch: duration_ms | 10000.0 |" in page
    assert "| start-up: duration_ms | 22000.0 |" in page
    assert '"after" row' not in "\n".join(page_section(data, _result("after")))
