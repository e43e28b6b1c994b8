"""Turnout/vLLM ratios from steady-state rounds, and the issue's goals met or missed (no vLLM import here)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Protocol

from benchmarks.result_types import Interval, Paired, ServerMedians, SteadyRound, SteadySummary, WorkloadSummary
from benchmarks.results import median

__all__ = ["GOAL", "SERVERS", "TARGET", "paired_ratios", "summarize", "within_noise"]

SERVERS = ("vllm", "turnout")
#: The goal and the target for Turnout/vLLM (req/s up, CPU per request down).
GOAL, TARGET = 1.0, 1.10
#: The figures a pair is compared on, as ``SteadyRound`` and ``Paired`` name them.
_PAIRED_METRICS = ("req_per_s", "cpu_ms_per_request")


class _Labelled(Protocol):
    @property
    def label(self) -> str: ...


def _geomean(values: list[float]) -> float:
    usable = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in usable) / len(usable)) if usable else float("nan")


def _interval(logs: list[float]) -> Interval:
    """Geometric mean of the ratios and its 95% interval (normal approximation of the mean of log ratios)."""
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        # One pair has no spread: the interval is unbounded above (and exp(-inf) = 0 below).
        return Interval(ratio=math.exp(mean), low=0.0, high=None)
    half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
    return Interval(ratio=math.exp(mean), low=math.exp(mean - half), high=math.exp(mean + half))


def paired_ratios(rows: list[SteadyRound], numerator: str = "turnout", denominator: str = "vllm") -> Paired:
    """Turnout/vLLM per (workload, round) pair, pooled: the noise of the comparison, not only its median.

    The two servers run each workload back to back within a round, so a pair shares the machine's state more
    closely than two medians do; the spread of the pairs says how far apart the servers could be told here.
    ``numerator`` and ``denominator`` name other servers of the rows to compare (a pair needs both).
    """
    pairs: dict[tuple[str, int], dict[str, SteadyRound]] = {}
    for row in rows:
        pairs.setdefault((row.workload, row.round), {})[row.server] = row
    logs: dict[str, list[float]] = {metric: [] for metric in _PAIRED_METRICS}
    for pair in pairs.values():
        if numerator not in pair or denominator not in pair:
            continue
        for metric, values in logs.items():
            above, below = getattr(pair[numerator], metric), getattr(pair[denominator], metric)
            if above > 0 and below > 0:
                values.append(math.log(above / below))
    intervals = {metric: _interval(values) for metric, values in logs.items() if values}
    return Paired(
        pairs=len(logs["req_per_s"]),
        req_per_s=intervals.get("req_per_s"),
        cpu_ms_per_request=intervals.get("cpu_ms_per_request"),
    )


def within_noise(goal: str, paired: Paired | None) -> bool:
    """Whether ``goal``'s threshold lies inside the 95% interval of its metric: this run cannot tell the two apart."""
    if paired is None:
        return False
    interval = (
        paired.req_per_s
        if goal.startswith("req_per_s")
        else paired.cpu_ms_per_request
        if goal.startswith("cpu")
        else None
    )
    if interval is None:
        return False
    threshold = TARGET if "target" in goal else GOAL
    if goal.startswith("cpu") and "target" in goal:
        threshold = 1 / TARGET
    return interval.low <= threshold and (interval.high is None or threshold <= interval.high)


def _medians(runs: list[SteadyRound]) -> ServerMedians:
    def present(values: Iterable[float | None]) -> list[float]:
        return [value for value in values if value is not None]

    return ServerMedians(
        req_per_s=median([run.req_per_s for run in runs]),
        ttft_p50_ms=median(present(run.ttft_p50_ms for run in runs)),
        ttft_p99_ms=median(present(run.ttft_p99_ms for run in runs)),
        cpu_ms_per_request=median([run.cpu_ms_per_request for run in runs]),
        failed=sum(run.failed for run in runs),
    )


def summarize(rows: list[SteadyRound], workloads: Iterable[_Labelled]) -> SteadySummary:
    """Medians per server and workload, Turnout/vLLM ratios, and the goals met or missed."""
    per_workload: list[WorkloadSummary] = []
    speeds: list[float] = []
    cpus: list[float] = []
    for workload in workloads:
        vllm, turnout = (
            _medians([row for row in rows if row.server == server and row.workload == workload.label])
            for server in SERVERS
        )
        # Medians of live rows are floats (NaN for none); None appears only in a decoded file.
        speed = _divide(turnout.req_per_s, vllm.req_per_s)
        cpu = _divide(turnout.cpu_ms_per_request, vllm.cpu_ms_per_request)
        speeds.append(speed)
        cpus.append(cpu)
        per_workload.append(
            WorkloadSummary(workload=workload.label, vllm=vllm, turnout=turnout, req_per_s_ratio=speed, cpu_ratio=cpu)
        )
    speed, cpu = _geomean(speeds), _geomean(cpus)
    failed = sum(entry.vllm.failed + entry.turnout.failed for entry in per_workload)
    return SteadySummary(
        per_workload=per_workload,
        paired=paired_ratios(rows),
        req_per_s_ratio=speed,
        cpu_ratio=cpu,
        failed=failed,
        goals={
            "req_per_s >= 1.0x vLLM": speed >= GOAL,
            "cpu/request <= 1.0x vLLM": cpu <= GOAL,
            "req_per_s >= 1.10x vLLM (target)": speed >= TARGET,
            "cpu/request <= 1/1.10 of vLLM (target)": cpu <= 1 / TARGET,
            "no failed requests": failed == 0,
        },
    )


def _divide(numerator: float | None, denominator: float | None) -> float:
    """A ratio of two medians; NaN where either is missing (as dividing NaNs gives)."""
    if numerator is None or denominator is None:
        return math.nan
    return numerator / denominator
