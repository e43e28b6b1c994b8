"""``just bench``: every benchmark, one after the other, then docs/benchmarks.md.

    .venv/bin/python -m benchmarks.run_all                 # full mode (what `just bench` runs)
    .venv/bin/python -m benchmarks.run_all --mode quick    # a short pass over everything, for trying it
    .venv/bin/python -m benchmarks.run_all --only steady_state,docs

Each benchmark runs in its own process (an engine crash or a hung server fails that step, not the run) and
prints its own table; the steps' outcomes go to ``results/run_all.json`` and onto the page. At most one pair of
servers is alive at a time.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import msgspec

from benchmarks import reliability_long
from benchmarks.cold_start_results import ColdStartOptions
from benchmarks.kv_keep import KvKeepOptions
from benchmarks.request_profile_results import RequestProfileOptions
from benchmarks.residency_live import ResidencyLiveOptions
from benchmarks.residency_policies import Options as ResidencyPoliciesOptions
from benchmarks.result_types import (
    AutoModeOptions,
    Captured,
    ClusterSimOptions,
    EngineLimitOptions,
    Replaced,
    RunAll,
    StepRecord,
    SwitchTimesOptions,
)
from benchmarks.results import RESULTS_DIR, machine, read_result, write_result
from benchmarks.switch_proof import SwitchProofOptions
from benchmarks.switch_weights import SwitchWeightsOptions
from server.tinymodels.spec import REPO_ROOT

__all__ = ["DEFAULT_MODE", "STEPS", "main"]

#: What ``just bench`` runs.
DEFAULT_MODE = "full"


@dataclass(frozen=True)
class Step:
    """One benchmark: its name and its command line per mode (None: the step does not exist yet)."""

    name: str
    quick: list[str]
    full: list[str]
    #: A module the step needs; the step is skipped (and says so) when it is missing.
    needs: str | None = None
    #: Keep the step's printout as ``results/<name>.json`` (for a benchmark that writes no JSON of its own).
    capture: bool = False
    #: A hung step fails alone instead of holding up the run (full mode on this 2-core machine, with margin).
    timeout_s: float = 45 * 60


def _interruptible() -> None:
    """In the step's process before it starts: SIGINT as a terminal gives it, whatever this process was given.

    A run started in the background (``&`` in a script, ``nohup``) ignores SIGINT, and an ignored signal stays
    ignored across ``exec``: the step would then shrug off the interrupt that stops its servers on a timeout.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _call(command: list[str], timeout_s: float, capture: bool) -> tuple[int | str, str]:
    """Run one step; on timeout interrupt it (its servers are stopped by its own cleanup), then kill it."""
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE if capture else None,
        text=True,
        preexec_fn=_interruptible,  # one thread here, and it only resets a signal
    )
    try:
        stdout, _ = process.communicate(timeout=timeout_s)
        return process.returncode, stdout or ""
    except subprocess.TimeoutExpired:
        # SIGINT first: the benchmarks stop the servers they started (own sessions) in ``finally`` blocks.
        process.send_signal(signal.SIGINT)
        try:
            stdout, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, _ = process.communicate()
        return f"timed out after {timeout_s:.0f} s", stdout or ""


_PY = [sys.executable, "-m"]
# Full mode runs each benchmark at its defaults; they are spelt out on the command line (read from the benchmarks'
# own defaults, not repeated here) so that the page shows what ran.
_LIMIT, _COLD, _SWITCH = EngineLimitOptions(), ColdStartOptions(), SwitchTimesOptions()
_WEIGHTS, _AUTO, _CLUSTER = SwitchWeightsOptions(), AutoModeOptions(), ClusterSimOptions()
_KV_KEEP, _PROOF, _PROFILE = KvKeepOptions(), SwitchProofOptions(), RequestProfileOptions()
_RESIDENCY_LIVE = ResidencyLiveOptions()
_RESIDENCY_POLICIES = ResidencyPoliciesOptions()


def _options(options: msgspec.Struct) -> list[str]:
    """``options`` as its benchmark's command line (``--name value`` per field)."""
    return [
        part
        for name in options.__struct_fields__
        for part in (f"--{name.replace('_', '-')}", f"{getattr(options, name)}")
    ]


STEPS: tuple[Step, ...] = (
    Step(
        "steady_state",
        [*_PY, "benchmarks.steady_state", "--mode", "quick"],
        [*_PY, "benchmarks.steady_state", "--mode", "full"],
    ),
    Step(
        "request_profile",
        [*_PY, "benchmarks.request_profile", "--rounds", "1", "--prompts", "100", "--sample-s", "10"],
        [*_PY, "benchmarks.request_profile", *_options(_PROFILE)],
    ),
    Step(
        "engine_limit",
        [*_PY, "benchmarks.engine_limit", "--prompts", "64", "--rounds", "1"],
        [*_PY, "benchmarks.engine_limit", "--prompts", str(_LIMIT.prompts), "--rounds", str(_LIMIT.rounds)],
    ),
    Step(
        "cold_start",
        [*_PY, "benchmarks.cold_start", "--rounds", "1"],
        [*_PY, "benchmarks.cold_start", "--rounds", str(_COLD.rounds)],
    ),
    Step(
        "switch_latency",
        [*_PY, "benchmarks.switch_latency", "--rounds", "1"],
        [*_PY, "benchmarks.switch_latency", "--rounds", str(_SWITCH.rounds)],
        needs="benchmarks/switch_times.py",
    ),
    Step(
        "switch_weights",
        [*_PY, "benchmarks.switch_weights", "--rounds", "1", "--rss-switches", "4"],
        [*_PY, "benchmarks.switch_weights", "--rounds", str(_WEIGHTS.rounds)],
    ),
    Step(
        "switch_proof",
        [*_PY, "benchmarks.switch_proof", "--rounds", "2"],
        [*_PY, "benchmarks.switch_proof", "--rounds", str(_PROOF.rounds), "--gib", str(_PROOF.gib)],
    ),
    Step(
        "kv_keep",
        [*_PY, "benchmarks.kv_keep", "--prefix-tokens", "1500", "--rounds", "1"],
        [*_PY, "benchmarks.kv_keep", "--prefix-tokens", str(_KV_KEEP.prefix_tokens), "--rounds", str(_KV_KEEP.rounds)],
    ),
    Step(
        "auto_mode",
        [*_PY, "benchmarks.auto_mode", "--requests", "40", "--blocks", "1,10"],
        [
            *_PY,
            "benchmarks.auto_mode",
            *("--requests", str(_AUTO.requests), "--blocks", ",".join(map(str, _AUTO.blocks))),
        ],
    ),
    Step(
        "scheduler_simulation",
        [sys.executable, "benchmarks/auto_scheduler.py", "--requests", "300"],
        [sys.executable, "benchmarks/auto_scheduler.py"],
        needs="benchmarks/auto_scheduler.py",
        capture=True,
    ),
    Step(
        "cluster_simulation",
        [*_PY, "benchmarks.cluster_sim", "--requests", "300"],
        [*_PY, "benchmarks.cluster_sim", "--requests", str(_CLUSTER.requests)],
    ),
    Step(
        "residency_policies",
        [*_PY, "benchmarks.residency_policies", "--quick"],
        [*_PY, "benchmarks.residency_policies", *_options(_RESIDENCY_POLICIES)],
    ),
    Step(
        "residency_live",
        [*_PY, "benchmarks.residency_live", "--quick"],
        [*_PY, "benchmarks.residency_live", *_options(_RESIDENCY_LIVE)],
    ),
    Step(
        "natural_profile",
        [*_PY, "benchmarks.natural_profile"],
        [*_PY, "benchmarks.natural_profile"],
        needs="tests/api/test_natural_profile.py",
    ),
    Step(
        "reliability_long",
        [*_PY, "benchmarks.reliability_long", "--mode", "quick"],
        [*_PY, "benchmarks.reliability_long", "--mode", reliability_long.DEFAULT_MODE],
        needs="tests/reliability",
    ),
)


def _run(step: Step, mode: str) -> StepRecord:
    command = step.quick if mode == "quick" else step.full
    shown = " ".join(["python", *map(shlex.quote, command[1:])])
    if step.needs is not None and not (REPO_ROOT / step.needs).exists():
        print(f"\n=== {step.name}: skipped ({step.needs} is missing)", flush=True)
        status, seconds = f"skipped: {step.needs} missing", 0.0
    else:
        print(f"\n=== {step.name}: {shown}", flush=True)
        start = time.monotonic()
        code, stdout = _call(command, step.timeout_s, step.capture)
        if step.capture:
            print(stdout, flush=True)
            write_result(step.name, Captured(command=shown, output=stdout))
        seconds = time.monotonic() - start
        status = "ok" if code == 0 else f"FAILED ({code if isinstance(code, str) else f'exit {code}'})"
        print(f"=== {step.name}: {status} in {seconds:.0f} s", flush=True)
    return StepRecord(name=step.name, command=shown, status=status, seconds=seconds, mode=mode, finished=machine().date)


def _replacing(step: StepRecord, earlier: list[StepRecord]) -> StepRecord:
    """``step`` keeping the outcomes it replaces, so that a step that failed, then passed, says so on the page."""
    for old in earlier:
        if old.name == step.name:
            replaced = Replaced(status=old.status, finished=old.finished)
            step = msgspec.structs.replace(step, replaces=[*old.replaces, replaced])
    return step


def main(mode: str = DEFAULT_MODE, only: tuple[str, ...] = ()) -> int:
    """Run the steps (all, or ``only`` these), write the page; returns the number of failed steps."""
    from benchmarks.docs_page import write_docs

    chosen = [step for step in STEPS if not only or step.name in only]
    steps = [_run(step, mode) for step in chosen]
    command = "just bench" if mode == "full" and not only else "python -m benchmarks.run_all " + " ".join(sys.argv[1:])
    if only:
        # A partial run updates its steps' records and keeps the others', so the page lists what produced each file.
        previous = read_result("run_all", RunAll)
        earlier = previous.steps if previous is not None else []
        ran = {step.name for step in steps}
        steps = [step for step in earlier if step.name not in ran] + [_replacing(step, earlier) for step in steps]
        steps.sort(key=lambda step: [s.name for s in STEPS].index(step.name))
    write_result("run_all", RunAll(mode=mode, command=command, steps=steps))
    if not only or "docs" in only:
        print(f"\nwrote {write_docs()}")
    failed = [step.name for step in steps if step.status.startswith("FAILED")]
    print(f"results in {RESULTS_DIR}; failed steps: {', '.join(failed) or 'none'}")
    return len(failed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("quick", "full"), default=DEFAULT_MODE)
    parser.add_argument(
        "--only", type=lambda s: tuple(s.split(",")), default=(), help="comma-separated step names (and 'docs')"
    )
    options = parser.parse_args()
    sys.exit(1 if main(options.mode, options.only) else 0)
