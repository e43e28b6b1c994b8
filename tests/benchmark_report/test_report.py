"""The benchmark report's arithmetic and page: goals judged from the figures, missing results said plainly."""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from benchmarks import docs_page, results, run_all
from benchmarks.ratios import paired_ratios, summarize, within_noise
from benchmarks.result_types import RunAll, SteadyConfig, SteadyRound, SteadyState, StepRecord


@dataclass(frozen=True)
class _Workload:
    label: str


def _row(round_no: int, server: str, workload: str, req_per_s: float, cpu: float) -> SteadyRound:
    return SteadyRound(
        round=round_no,
        server=server,
        workload=workload,
        completed=10,
        failed=0,
        req_per_s=req_per_s,
        ttft_p50_ms=10.0,
        ttft_p99_ms=20.0,
        cpu_ms_per_request=cpu,
        first_error=None,
    )


def _rows(workload: str, vllm: tuple[float, float], turnout: tuple[float, float], rounds: int = 3) -> list[SteadyRound]:
    rows = []
    for round_no in range(rounds):
        for server, (req_per_s, cpu) in (("vllm", vllm), ("turnout", turnout)):
            # The middle round is an outlier on both servers: the median must ignore it.
            noise = 4.0 if round_no == 1 else 1.0
            rows.append(_row(round_no, server, workload, req_per_s * noise, cpu))
    return rows


def test_summarize_takes_medians_and_judges_each_goal() -> None:
    rows = _rows("chat stream c16", vllm=(100, 2.0), turnout=(121, 1.6)) + _rows("chat json c1", (10, 4.0), (10, 4.4))

    summary = summarize(rows, [_Workload("chat stream c16"), _Workload("chat json c1")])

    first = summary.per_workload[0]
    assert first.vllm.req_per_s == 100
    assert first.req_per_s_ratio == pytest.approx(1.21)
    assert summary.req_per_s_ratio == pytest.approx(1.1)  # geometric mean of 1.21 and 1.0
    assert summary.cpu_ratio == pytest.approx((0.8 * 1.1) ** 0.5)
    goals = summary.goals
    assert goals["req_per_s >= 1.0x vLLM"] and goals["cpu/request <= 1.0x vLLM"]
    assert goals["req_per_s >= 1.10x vLLM (target)"]
    assert not goals["cpu/request <= 1/1.10 of vLLM (target)"]  # 0.938 > 1/1.1
    assert goals["no failed requests"]


def test_a_slower_turnout_misses_the_goal() -> None:
    summary = summarize(_rows("completions json c64", (100, 2.0), (90, 2.4)), [_Workload("completions json c64")])

    assert not summary.goals["req_per_s >= 1.0x vLLM"]
    assert not summary.goals["cpu/request <= 1.0x vLLM"]


def test_the_page_says_what_was_not_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    rows = _rows("chat stream c16", vllm=(100, 2.0), turnout=(90, 2.4))
    config = SteadyConfig(rounds=3, prompts=10, concurrency=(16,), kinds=("chat",), model="tools", engine_args={})
    results.write_result(
        "steady_state",
        SteadyState(
            mode="quick",
            config=config,
            commands={"vllm": "python -m vllm.entrypoints.openai.api_server --model m"},
            seconds=12.0,
            rounds=rows,
            summary=summarize(rows, [_Workload("chat stream c16")]),
        ),
    )

    page = docs_page.render()

    assert "**MISSED**: req_per_s >= 1.0x vLLM" in page
    assert "| chat stream c16 | 100.0 | 90.0 | 0.90x |" in page
    assert "Turnout's switch times were **not measured**" in page
    assert "## Load-and-fault suite (long mode)\n\n**Not run**" in page


def test_paired_rounds_give_an_interval_that_says_when_a_goal_is_within_the_noise() -> None:
    # Turnout is 0.9x in one round's pair and 1.1x in the other's: the pooled interval spans 1.0.
    rows = [
        _row(1, "vllm", "w", 100.0, 2.0),
        _row(1, "turnout", "w", 90.0, 2.0),
        _row(2, "vllm", "w", 50.0, 4.0),
        _row(2, "turnout", "w", 55.0, 2.0),
        # An unpaired row (its partner failed to run) is left out.
        _row(3, "vllm", "w", 10.0, 9.0),
    ]

    paired = paired_ratios(rows)

    assert paired.pairs == 2
    speed = paired.req_per_s
    assert speed is not None and speed.high is not None
    assert speed.ratio == pytest.approx((0.9 * 1.1) ** 0.5)
    assert speed.low < 1.0 < speed.high
    assert within_noise("req_per_s >= 1.0x vLLM", paired)
    assert paired.cpu_ms_per_request is not None
    assert paired.cpu_ms_per_request.ratio == pytest.approx(0.5**0.5)
    assert not within_noise("no failed requests", paired)


def test_a_tight_interval_away_from_the_goal_is_not_noise() -> None:
    rows = [_row(r, s, "w", v, 1.0) for r in range(5) for s, v in (("vllm", 100.0 + r), ("turnout", 80.0 + 0.8 * r))]

    paired = paired_ratios(rows)

    assert paired.req_per_s is not None and paired.req_per_s.high is not None
    assert paired.req_per_s.high < 1.0
    assert not within_noise("req_per_s >= 1.0x vLLM", paired)


def test_a_rerun_step_keeps_the_failure_it_replaces_on_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    first = StepRecord(
        name="reliability_long", command="c", status="FAILED (exit 1)", seconds=9.0, mode="full", finished="23:32 UTC"
    )
    results.write_result("run_all", RunAll(mode="full", command="just bench", steps=[first]))
    rerun = msgspec.structs.replace(first, status="ok", finished="00:00 UTC")
    monkeypatch.setattr(run_all, "_run", lambda step, mode: rerun)

    assert run_all.main("full", ("reliability_long",)) == 0

    record = results.read_result("run_all", RunAll)
    assert record is not None
    (step,) = record.steps
    assert step.status == "ok"
    assert [(r.status, r.finished) for r in step.replaces] == [("FAILED (exit 1)", "23:32 UTC")]
    assert "ok; replaces FAILED (exit 1) of 23:32 UTC" in "\n".join(docs_page._steps(record))


def test_a_timed_out_step_is_interrupted_even_when_the_run_ignores_sigint() -> None:
    # A run started in the background ignores SIGINT; its steps must still take the interrupt that stops their
    # servers (``finally`` blocks), not sit out the minute's grace and be killed with their servers left running.
    lines = ("import time", "try:", "    print('up', flush=True)", "    time.sleep(120)", "except KeyboardInterrupt:")
    step = "\n".join((*lines, "    print('cleaned up')"))
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        started = time.monotonic()
        code, stdout = run_all._call([sys.executable, "-c", step], timeout_s=2, capture=True)
    finally:
        signal.signal(signal.SIGINT, before)
    assert code == "timed out after 2 s"
    assert stdout.split() == ["up", "cleaned", "up"]
    assert time.monotonic() - started < 30
