"""Steady state: vLLM's own OpenAI server against ``turnout serve``, same model, same engine arguments.

    .venv/bin/python -m benchmarks.steady_state --mode quick     # a few minutes, for trying it
    .venv/bin/python -m benchmarks.steady_state --mode full      # what `just bench` runs (>= 7 rounds)

Both servers run at once (one pair, nothing else) and are measured in alternation: each round runs every
workload (chat and completions, streaming and not, each concurrency) on one server and then on the other,
the order swapping every round, so that both see the same machine. This machine's throughput is bimodal (a run
lands near 200 or near 50 req/s, whichever server it measures), so req/s and TTFT are reported per round and as
medians, beside the stable figure: the frontend process's CPU milliseconds per request (``/proc``, the server
process alone, not its engine-core child).

Goals (issue 11): Turnout >= 1.0x vLLM's req/s and <= 1.0x its frontend CPU per request; 1.10x is the target.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.load import LoadResult, Workload, run_load
from benchmarks.ratios import SERVERS, summarize, within_noise
from benchmarks.result_types import SteadyConfig, SteadyRound, SteadyState, SteadySummary
from benchmarks.results import RESULTS_DIR, write_result
from benchmarks.servers import DEMO_PROFILE, ServerProcess, repo_relative, served_model, start_turnout, start_vllm
from server.tinymodels.builder import build_tiny_models

__all__ = ["DEFAULT_MODE", "MODES", "RESULT", "main"]

#: Run lengths: rounds per server, prompts per client run (fewer at concurrency 1, which is latency-bound and
#: takes the longest per request), and the workload grid.
MODES: dict[str, dict[str, Any]] = {
    "quick": {
        "rounds": 2,
        "prompts": 64,
        "c1_prompts": 24,
        "concurrency": (1, 16, 64),
        "kinds": ("chat", "completions"),
    },
    "full": {
        "rounds": 7,
        "prompts": 160,
        "c1_prompts": 48,
        "concurrency": (1, 16, 64),
        "kinds": ("chat", "completions"),
    },
}
#: The mode and the result file's name when none is given.
DEFAULT_MODE, RESULT = "quick", "steady_state"


def _workloads(kinds: tuple[str, ...], concurrency: tuple[int, ...], prompts: int, c1_prompts: int) -> list[Workload]:
    return [
        Workload(kind=kind, streaming=streaming, concurrency=c, num_prompts=prompts if c > 1 else c1_prompts)
        for kind, streaming, c in itertools.product(kinds, (True, False), concurrency)
    ]


def _print_row(round_no: int, server: str, workload: Workload, result: LoadResult) -> None:
    failed = f"  FAILED {result.failed}: {result.first_error}" if result.failed else ""
    print(
        f"{round_no:>5}  {server:<8} {workload.label:<22} {result.req_per_s:>8.1f} {result.ttft_p50_ms:>9.1f} "
        f"{result.ttft_p99_ms:>9.1f} {result.cpu_ms_per_request:>8.2f}{failed}",
        flush=True,
    )


def _print_summary(summary: SteadySummary) -> None:
    # Built from live rows, every figure here is a float (NaN where missing), never None.
    print("\nmedians              req/s (vLLM / Turnout / ratio)   TTFT p50 ms        TTFT p99 ms        CPU-ms/req")
    for entry in summary.per_workload:
        v, t = entry.vllm, entry.turnout
        print(
            f"{entry.workload:<22} {v.req_per_s:>7.1f} {t.req_per_s:>7.1f} {entry.req_per_s_ratio:>5.2f}x"
            f"   {v.ttft_p50_ms:>7.1f} {t.ttft_p50_ms:>7.1f}   {v.ttft_p99_ms:>7.1f} {t.ttft_p99_ms:>7.1f}"
            f"   {v.cpu_ms_per_request:>5.2f} {t.cpu_ms_per_request:>5.2f} {entry.cpu_ratio:>5.2f}x"
        )
    print(
        f"\nTurnout/vLLM (geometric mean over workloads): req/s {summary.req_per_s_ratio:.3f}x, "
        f"CPU per request {summary.cpu_ratio:.3f}x"
    )
    paired = summary.paired
    if paired is not None and paired.req_per_s is not None and paired.cpu_ms_per_request is not None:
        speed, cpu = paired.req_per_s, paired.cpu_ms_per_request
        high = {name: f"{x.high:.3f}" if x.high is not None else "inf" for name, x in (("speed", speed), ("cpu", cpu))}
        print(
            f"paired rounds ({paired.pairs}): "
            f"req/s {speed.ratio:.3f}x [{speed.low:.3f}, {high['speed']}], "
            f"CPU per request {cpu.ratio:.3f}x [{cpu.low:.3f}, {high['cpu']}] (95% intervals)"
        )
    for goal, met in summary.goals.items():
        noise = "  (within the noise)" if within_noise(goal, paired) else ""
        print(f"  {'met   ' if met else 'MISSED'}  {goal}{noise}")


def main(
    mode: str = DEFAULT_MODE,
    *,
    rounds: int | None = None,
    prompts: int | None = None,
    concurrency: tuple[int, ...] | None = None,
    kinds: tuple[str, ...] | None = None,
    name: str = RESULT,
    log_dir: Path = RESULTS_DIR / "logs",
) -> SteadyState:
    """Run the comparison, print its tables and write ``<results>/<name>.json``; returns the result."""
    config = {**MODES[mode]}
    config.update({k: v for k, v in {"rounds": rounds, "prompts": prompts}.items() if v is not None})
    config["concurrency"] = concurrency or config["concurrency"]
    config["kinds"] = kinds or config["kinds"]
    build_tiny_models()
    model = served_model(DEMO_PROFILE)
    if prompts is not None:
        config["c1_prompts"] = min(config["c1_prompts"], prompts)
    workloads = _workloads(config["kinds"], config["concurrency"], config["prompts"], config["c1_prompts"])
    log_dir.mkdir(parents=True, exist_ok=True)
    client_log = (log_dir / f"{name}-client.log").open("w")
    servers: dict[str, ServerProcess] = {}
    rows: list[SteadyRound] = []
    started = time.monotonic()
    try:
        servers["vllm"] = start_vllm(model, log_dir)
        servers["turnout"] = start_turnout(DEMO_PROFILE, log_dir)
        for process in servers.values():
            process.wait_ready()
        print(f"servers ready (vLLM pid {servers['vllm'].pid}, Turnout pid {servers['turnout'].pid})", flush=True)

        def run(label: str, workload: Workload, seed: int) -> LoadResult:
            process = servers[label]
            return run_load(
                workload,
                base_url=process.url,
                model_path=model.model.model,
                served_name=model.name,
                server_cpu_seconds=process.cpu_seconds,
                seed=seed,
                log=client_log,
            )

        # Warm-up, discarded: first requests pay for lazy imports, template compilation and caches.
        for label, kind in itertools.product(SERVERS, config["kinds"]):
            for streaming in (True, False):
                run(label, Workload(kind=kind, streaming=streaming, concurrency=16, num_prompts=32), seed=999)
        print("round  server   workload                  req/s  TTFT p50  TTFT p99  CPU-ms/req", flush=True)
        for round_no in range(1, config["rounds"] + 1):
            order = SERVERS if round_no % 2 else SERVERS[::-1]
            for workload in workloads:
                for label in order:
                    measured = run(label, workload, seed=round_no)
                    _print_row(round_no, label, workload, measured)
                    rows.append(
                        SteadyRound(
                            round=round_no, server=label, workload=workload.label, **msgspec.structs.asdict(measured)
                        )
                    )
    finally:
        for server_process in servers.values():
            server_process.stop()
        client_log.close()
    summary = summarize(rows, workloads)
    _print_summary(summary)
    result = SteadyState(
        mode=mode,
        config=SteadyConfig(**config, model=model.name, engine_args=model.model.engine_args),
        commands={
            "vllm": repo_relative("python -m vllm.entrypoints.openai.api_server " + " ".join(model.vllm_arguments())),
            "turnout": f"turnout serve {DEMO_PROFILE.relative_to(DEMO_PROFILE.parents[1])}",
            "client": "vllm.benchmarks.serve (add_cli_args + main): --dataset-name random --random-input-len 32 "
            "--random-output-len 8 --temperature 0 --request-rate inf --max-concurrency C",
        },
        seconds=round(time.monotonic() - started, 1),
        rounds=rows,
        summary=summary,
    )
    path = write_result(name, result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=sorted(MODES), default=DEFAULT_MODE)
    parser.add_argument("--rounds", type=int, help="rounds per server (default: the mode's)")
    parser.add_argument("--prompts", type=int, help="requests per client run (default: the mode's)")
    parser.add_argument("--concurrency", type=lambda s: tuple(int(c) for c in s.split(",")), help="e.g. 1,16,64")
    parser.add_argument("--kinds", type=lambda s: tuple(s.split(",")), help="chat,completions")
    parser.add_argument("--name", default=RESULT, help="result file name (e.g. steady_state_before)")
    options = parser.parse_args()
    main(
        options.mode,
        rounds=options.rounds,
        prompts=options.prompts,
        concurrency=options.concurrency,
        kinds=options.kinds,
        name=options.name,
    )
    sys.exit(0)
