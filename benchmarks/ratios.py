"""Turnout/vLLM ratios from steady-state rounds, and the issue's goals met or missed (no vLLM import here)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any, Protocol

from benchmarks.results import median

__all__ = ["GOAL", "SERVERS", "TARGET", "paired_ratios", "summarize", "within_noise"]

SERVERS = ("vllm", "turnout")
#: The goal and the target for Turnout/vLLM (req/s up, CPU per request down).
GOAL, TARGET = 1.0, 1.10


class _Labelled(Protocol):
    @property
    def label(self) -> str: ...


def _geomean(values: list[float]) -> float:
    usable = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in usable) / len(usable)) if usable else float("nan")


def _interval(logs: list[float]) -> dict[str, float]:
    """Geometric mean of the ratios and its 95% interval (normal approximation of the mean of log ratios)."""
    mean = statistics.fmean(logs)
    half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
    return {"ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half)}


def paired_ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Turnout/vLLM per (workload, round) pair, pooled: the noise of the comparison, not only its median.

    The two servers run each workload back to back within a round, so a pair shares the machine's state more
    closely than two medians do; the spread of the pairs says how far apart the servers could be told here.
    """
    pairs: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for row in rows:
        pairs.setdefault((row["workload"], row["round"]), {})[row["server"]] = row
    logs: dict[str, list[float]] = {"req_per_s": [], "cpu_ms_per_request": []}
    for pair in pairs.values():
        if set(pair) != set(SERVERS):
            continue
        for metric, values in logs.items():
            turnout, vllm = pair["turnout"][metric], pair["vllm"][metric]
            if turnout > 0 and vllm > 0:
                values.append(math.log(turnout / vllm))
    return {"pairs": len(logs["req_per_s"]), **{m: _interval(v) for m, v in logs.items() if v}}


def within_noise(goal: str, paired: dict[str, Any]) -> bool:
    """Whether ``goal``'s threshold lies inside the 95% interval of its metric: this run cannot tell the two apart."""
    metric = "req_per_s" if goal.startswith("req_per_s") else "cpu_ms_per_request" if goal.startswith("cpu") else None
    if metric is None or metric not in paired:
        return False
    threshold = TARGET if "target" in goal else GOAL
    if metric == "cpu_ms_per_request" and "target" in goal:
        threshold = 1 / TARGET
    return bool(paired[metric]["low"] <= threshold <= paired[metric]["high"])


def summarize(rows: list[dict[str, Any]], workloads: Iterable[_Labelled]) -> dict[str, Any]:
    """Medians per server and workload, Turnout/vLLM ratios, and the goals met or missed."""
    per_workload: list[dict[str, Any]] = []
    for workload in workloads:
        entry: dict[str, Any] = {"workload": workload.label}
        for server in SERVERS:
            runs = [row for row in rows if row["server"] == server and row["workload"] == workload.label]
            entry[server] = {
                metric: median([run[metric] for run in runs])
                for metric in ("req_per_s", "ttft_p50_ms", "ttft_p99_ms", "cpu_ms_per_request")
            }
            entry[server]["failed"] = sum(run["failed"] for run in runs)
        entry["req_per_s_ratio"] = entry["turnout"]["req_per_s"] / entry["vllm"]["req_per_s"]
        entry["cpu_ratio"] = entry["turnout"]["cpu_ms_per_request"] / entry["vllm"]["cpu_ms_per_request"]
        per_workload.append(entry)
    speed = _geomean([entry["req_per_s_ratio"] for entry in per_workload])
    cpu = _geomean([entry["cpu_ratio"] for entry in per_workload])
    failed = sum(entry[server]["failed"] for entry in per_workload for server in SERVERS)
    return {
        "per_workload": per_workload,
        "paired": paired_ratios(rows),
        "req_per_s_ratio": speed,
        "cpu_ratio": cpu,
        "failed": failed,
        "goals": {
            "req_per_s >= 1.0x vLLM": speed >= GOAL,
            "cpu/request <= 1.0x vLLM": cpu <= GOAL,
            "req_per_s >= 1.10x vLLM (target)": speed >= TARGET,
            "cpu/request <= 1/1.10 of vLLM (target)": cpu <= 1 / TARGET,
            "no failed requests": failed == 0,
        },
    }
