"""The load-and-fault suite (tests/reliability) in its long version, for ``just bench``.

    .venv/bin/python -m benchmarks.reliability_long [--mode full|quick]

``full`` sets ``TURNOUT_RELIABILITY=long`` (300 requests and 10 admin switches per strategy, as issue 11
asks); ``quick`` runs the short version CI runs. Each traffic run's summary (completed, refused, lost, wrong)
comes back through ``TURNOUT_RELIABILITY_OUT`` and goes into ``reliability_long.json`` with the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import msgspec

from benchmarks.result_types import ReliabilityLong, ReliabilityRun
from benchmarks.results import RESULTS_DIR, write_result
from server.tinymodels.spec import REPO_ROOT

__all__ = ["DEFAULT_MODE", "main"]

#: What ``just bench`` runs: the long version.
DEFAULT_MODE = "full"


def main(mode: str = DEFAULT_MODE) -> int:
    """Run the suite; returns pytest's exit code."""
    out = RESULTS_DIR / "reliability"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    env = {
        **os.environ,
        "TURNOUT_RELIABILITY": "long" if mode == "full" else "short",
        "TURNOUT_RELIABILITY_OUT": str(out),
    }
    command = [sys.executable, "-m", "pytest", "tests/reliability", "-q", "-p", "no:cacheprovider", "-rfE"]
    start = time.monotonic()
    completed = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    print(completed.stdout[-6000:], completed.stderr[-2000:], sep="\n", flush=True)
    texts = {path.stem: path.read_bytes() for path in sorted(out.glob("*.json"))}
    tail = completed.stdout.strip().splitlines()[-1:] or ["(no output)"]
    # The summary lines show each run as the suite wrote it (every key, in its order); the result keeps it typed.
    lines = [f"{name}: {json.dumps(json.loads(text))}" for name, text in texts.items()]
    result = ReliabilityLong(
        command=f"TURNOUT_RELIABILITY={env['TURNOUT_RELIABILITY']} python -m pytest tests/reliability",
        status="passed" if completed.returncode == 0 else f"FAILED (pytest exit {completed.returncode})",
        seconds=seconds,
        summary="\n".join([*lines, *tail]),
        runs={name: msgspec.json.decode(text, type=ReliabilityRun) for name, text in texts.items()},
    )
    print(f"wrote {write_result('reliability_long', result)}")
    return completed.returncode


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("quick", "full"), default=DEFAULT_MODE)
    sys.exit(main(parser.parse_args().mode))
