"""A ``stop`` switch to a model with no engine, and Turnout's own start, against vLLM's own server cold.

    .venv/bin/python -m benchmarks.cold_start [--rounds 3] [--model plain] [--label before]

Both sides run in one process on the same model and engine flags (a demo model's), one round at a time, the order
swapping each round (this machine is noisy and bimodal, so the two sides are compared round by round):

- vLLM's own server cold: ``python -m vllm.entrypoints.openai.api_server`` on the model, timed from the process
  start to ``/health`` 200, then to the first token of a streamed chat. Their sum is what a user of a one-model
  server waits to change models (before counting the old server's shutdown).
- Turnout: ``turnout serve`` on the demo's two models (the same engine flags) with strategy ``stop``, starting on
  the other model: the process start to ``/ready`` (Turnout's start), a first token there, then a ``stop`` switch
  to the model (``POST /v1/models/switch``, the admin route ``turnout switch`` calls; the target holds no engine),
  timed from the switch request to the first token of a streamed chat on it. The switch's response and the
  start-up activation's report (``/admin/status``) are kept whole; their ``*_ms`` fields and any field named
  ``*phase*`` are the phases (``benchmarks/cold_start_results.py``).

Issue 40's goals: the switch to its first token at most 0.25x vLLM's cold start to its first token, and Turnout's
start to ``/ready`` no slower than vLLM's to ``/health``. Every run writes ``cold_start.json``; ``--label before``
also writes ``cold_start_before.json``, so that runs before and after a change sit side by side on the docs page.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.cold_start_results import (
    ColdStart,
    ColdStartConfig,
    ColdStartOptions,
    ColdStartRound,
    TurnoutColdRound,
    judge,
    result_name,
    table_lines,
)
from benchmarks.results import RESULTS_DIR, write_result
from benchmarks.servers import (
    DEMO_PROFILE,
    ServedModel,
    first_token_seconds,
    repo_relative,
    served_model,
    start_turnout,
    start_vllm,
)
from benchmarks.switch_times import TOKEN, demo_profile, post_switch
from server.profiles import load_profile
from server.tinymodels.builder import build_tiny_models

__all__ = ["main", "measure_cold_start", "measure_turnout"]

LOG_DIR = RESULTS_DIR / "logs"


def measure_cold_start(model: ServedModel, round_no: int) -> ColdStartRound:
    """One cold start of vLLM's own server on ``model``: seconds to ready, then to the first token."""
    start = time.monotonic()
    server = start_vllm(model, LOG_DIR, label=f"vllm-cold-{round_no}")
    try:
        server.wait_ready()
        ready_s = time.monotonic() - start
        with httpx.Client(base_url=server.url, timeout=120.0) as client:
            ttft_s = first_token_seconds(client, model.name)
    finally:
        stop_start = time.monotonic()
        server.stop()
        stop_s = time.monotonic() - stop_start
    return ColdStartRound(ready_s=ready_s, first_token_s=ttft_s, total_s=ready_s + ttft_s, shutdown_s=stop_s)


def _start_report(client: httpx.Client) -> dict[str, Any] | None:
    """The start-up activation's report (``/admin/status``'s ``last_switch``), or None when it gives none."""
    response = client.get("/admin/status", headers={"Authorization": f"Bearer {TOKEN}"})
    if response.status_code != 200:
        return None
    report = response.json().get("last_switch")
    return report if isinstance(report, dict) else None


def measure_turnout(profile: Path, start_model: str, target: str, round_no: int, first: str) -> TurnoutColdRound:
    """One cold ``turnout serve`` on ``profile``: its start to ``/ready``, then a ``stop`` switch to ``target``."""
    start = time.monotonic()
    server = start_turnout(profile, LOG_DIR, label=f"turnout-cold-{round_no}", env={"TURNOUT_ADMIN_TOKEN": TOKEN})
    try:
        server.wait_ready()
        ready_s = time.monotonic() - start
        with httpx.Client(base_url=server.url, timeout=600.0) as client:
            first_token_s = first_token_seconds(client, start_model)
            start_report = _start_report(client)
            switch_start = time.perf_counter()
            switch_ms, report = post_switch(client, target, TOKEN)
            first_token_seconds(client, target)
            switch_first_token_s = time.perf_counter() - switch_start
    finally:
        stop_start = time.monotonic()
        server.stop()
        stop_s = time.monotonic() - stop_start
    return TurnoutColdRound(
        ready_s=ready_s,
        first_token_s=first_token_s,
        switch_s=switch_ms / 1000.0,
        switch_first_token_s=switch_first_token_s,
        shutdown_s=stop_s,
        first=first,
        switch_report=report,
        start_report=start_report,
    )


def main(options: ColdStartOptions | None = None) -> ColdStart:
    """Measure both sides, print the table and write ``cold_start.json`` (and ``cold_start_<label>.json``)."""
    options = options or ColdStartOptions()
    build_tiny_models()
    model = served_model(DEMO_PROFILE, options.model)
    start_model = next(name for name in load_profile(str(DEMO_PROFILE)).models if name != options.model)
    vllm_rows: list[ColdStartRound] = []
    turnout_rows: list[TurnoutColdRound] = []
    with tempfile.TemporaryDirectory(prefix="turnout-cold-start-") as tmp:
        profile = demo_profile("stop", Path(tmp), default_model=start_model)
        for round_no in range(1, options.rounds + 1):
            # Odd rounds start with vLLM, even ones with Turnout: neither side always runs on the warmer machine.
            first = "vllm" if round_no % 2 else "turnout"
            for side in ("vllm", "turnout") if first == "vllm" else ("turnout", "vllm"):
                print(f"round {round_no}: {side}", flush=True)
                if side == "vllm":
                    vllm_rows.append(measure_cold_start(model, round_no))
                else:
                    turnout_rows.append(measure_turnout(profile, start_model, options.model, round_no, first))
        turnout_command = repo_relative(f"turnout serve {profile.name}  # {profile.name}: {profile.read_text()}")
    vllm, turnout, goals = judge(vllm_rows, turnout_rows)
    command = repo_relative("python -m vllm.entrypoints.openai.api_server " + " ".join(model.vllm_arguments()))
    config = ColdStartConfig(
        rounds=options.rounds,
        model=options.model,
        label=options.label,
        command=command,
        turnout_command=turnout_command,
        start_model=start_model,
    )
    result = ColdStart(
        config=config, rounds=vllm_rows, medians=vllm, turnout=turnout_rows, turnout_medians=turnout, goals=goals
    )
    print("\n".join(["", *table_lines(result)]), flush=True)
    # The latest run is always cold_start.json (the switch-latency section reads it); a label keeps a copy.
    for name in dict.fromkeys(("cold_start", result_name(options.label))):
        print(f"wrote {write_result(name, result)}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = ColdStartOptions()
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--model", default=defaults.model, help="the demo model vLLM starts and Turnout switches to")
    parser.add_argument(
        "--label", default=defaults.label, help="names the run (before, after): also written as cold_start_LABEL.json"
    )
    given = parser.parse_args()
    main(ColdStartOptions(rounds=given.rounds, model=given.model, label=given.label))
