"""What a switch competes with: restarting vLLM's own server on the target model.

    .venv/bin/python -m benchmarks.cold_start [--rounds 3] [--model plain]

Per round: start ``python -m vllm.entrypoints.openai.api_server`` on the model (the demo's engine arguments),
time the start to ``/health`` 200, then the first token of a streamed chat. Their sum is what a user of a
one-model server waits to change models (before counting the old server's shutdown).
"""

from __future__ import annotations

import argparse
import time

import httpx

from benchmarks.result_types import ColdStart, ColdStartConfig, ColdStartOptions, ColdStartRound
from benchmarks.results import RESULTS_DIR, median, write_result
from benchmarks.servers import DEMO_PROFILE, ServedModel, first_token_seconds, served_model, start_vllm
from server.tinymodels.builder import build_tiny_models

__all__ = ["main", "measure_cold_start"]


def measure_cold_start(model: ServedModel, round_no: int) -> ColdStartRound:
    """One cold start of vLLM's own server on ``model``: seconds to ready, then to the first token."""
    start = time.monotonic()
    server = start_vllm(model, RESULTS_DIR / "logs", label=f"vllm-cold-{round_no}")
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


def main(options: ColdStartOptions | None = None) -> ColdStart:
    """Measure, print and write ``cold_start.json``."""
    options = options or ColdStartOptions()
    build_tiny_models()
    model = served_model(DEMO_PROFILE, options.model)
    rows: list[ColdStartRound] = []
    print("round  start->ready s  ->first token s  total s  (shutdown s)", flush=True)
    for round_no in range(1, options.rounds + 1):
        row = measure_cold_start(model, round_no)
        rows.append(row)
        print(
            f"{round_no:>5} {row.ready_s:>15.2f} {row.first_token_s:>16.3f} {row.total_s:>8.2f}"
            f"  ({row.shutdown_s:.1f})",
            flush=True,
        )
    medians = ColdStartRound(
        ready_s=median([row.ready_s for row in rows]),
        first_token_s=median([row.first_token_s for row in rows]),
        total_s=median([row.total_s for row in rows]),
        shutdown_s=median([row.shutdown_s for row in rows]),
    )
    command = "python -m vllm.entrypoints.openai.api_server " + " ".join(model.vllm_arguments())
    result = ColdStart(
        config=ColdStartConfig(rounds=options.rounds, model=options.model, command=command),
        rounds=rows,
        medians=medians,
    )
    print(f"median total {medians.total_s:.2f} s; wrote {write_result('cold_start', result)}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = ColdStartOptions()
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--model", default=defaults.model)
    given = parser.parse_args()
    main(ColdStartOptions(rounds=given.rounds, model=given.model))
