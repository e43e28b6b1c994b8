"""Turnout/vLLM ratios from steady-state rounds, and the issue's goals met or missed (no vLLM import here)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

from benchmarks.results import median

__all__ = ["GOAL", "SERVERS", "TARGET", "summarize"]

SERVERS = ("vllm", "turnout")
#: The goal and the target for Turnout/vLLM (req/s up, CPU per request down).
GOAL, TARGET = 1.0, 1.10


class _Labelled(Protocol):
    @property
    def label(self) -> str: ...


def _geomean(values: list[float]) -> float:
    usable = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in usable) / len(usable)) if usable else float("nan")


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
