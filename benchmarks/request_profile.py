"""Where a request's CPU goes: Turnout against vLLM's own server at a fixed request rate, per stage.

    .venv/bin/python -m benchmarks.request_profile                        # what `just bench` runs
    .venv/bin/python -m benchmarks.request_profile --rounds 1 --prompts 100 --sample-s 10   # a short pass

Both servers run at once on the demo's ``tools`` model with the same engine arguments. vLLM's benchmark client
sends each workload (chat and completions, streamed and as JSON) at a fixed rate (``--request-rate``, 32 tokens
in and 8 out), so both servers get the same load whatever their speed; a run at full speed would flatter the
faster server, whose fixed costs spread over more requests. Each round runs every workload on one server, then
the other, the order swapping every round; the ratios come from those pairs, with their 95% interval (this
machine is bimodal). CPU-ms per request counts every process of the server but the engine core and the engine's
workers (vLLM names them ``VLLM::...``): work moved into a child process still counts.

Beside them, in every round and at the same rate, runs the floor (``benchmarks/engine_floor.py``): vLLM's
``AsyncLLM`` alone in a process with the same model and engine arguments, no HTTP and no frontend, whose CPU per
request any server that runs vLLM's engine client pays; its ratio to vLLM's server says how far down the goal
can be reached at this load.

Then, with py-spy (the ``test`` extra has it), each server's frontend process is sampled under chat streaming
at the same rate, and each sample is put into one stage of a request (``request_profile_results.STAGES``).
Results go to ``benchmarks/results/request_profile.json`` and, through ``docs_page``, ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import psutil

from benchmarks.engine_floor import FloorJob, read_answer
from benchmarks.load import LoadResult, Workload, run_load
from benchmarks.ratios import SERVERS, summarize
from benchmarks.request_profile_results import (
    FLOOR,
    RequestProfile,
    RequestProfileOptions,
    StageSample,
    page_section,
    paired_cpu,
    stage_shares,
)
from benchmarks.result_types import SteadyRound
from benchmarks.results import RESULTS_DIR, write_result
from benchmarks.servers import (
    DEMO_PROFILE,
    ServedModel,
    ServerProcess,
    repo_relative,
    served_model,
    start_turnout,
    start_vllm,
)
from server.tinymodels.builder import build_tiny_models

__all__ = ["RESULT", "main", "server_cpu_seconds"]

RESULT = "request_profile"
#: The title vLLM gives its engine-core and worker processes (``setproctitle``): the engine, not the server.
_ENGINE_TITLE = "VLLM::"


def server_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its descendants, less vLLM's engine processes."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            if process is not root and _is_engine(process):
                continue
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue  # ended between the listing and the reading
    return total


def _is_engine(process: psutil.Process) -> bool:
    return process.name().startswith(_ENGINE_TITLE) or " ".join(process.cmdline()).startswith(_ENGINE_TITLE)


def _workloads(options: RequestProfileOptions) -> list[Workload]:
    return [
        Workload(kind, streaming, options.concurrency, options.prompts, request_rate=options.rate)
        for kind in ("chat", "completions")
        for streaming in (True, False)
    ]


class _Floor:
    """The floor's child process (``benchmarks.engine_floor``): one job in, one answer out, per run."""

    def __init__(self, log_dir: Path) -> None:
        self._log = (log_dir / f"{RESULT}-floor.log").open("w")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.engine_floor"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )

    def run(self, workload: Workload, seed: int) -> LoadResult:
        assert self._process.stdin is not None and self._process.stdout is not None
        job = FloorJob(
            streaming=workload.streaming,
            rate=workload.request_rate,
            prompts=workload.num_prompts,
            concurrency=workload.concurrency,
            seed=seed,
            input_len=workload.input_len,
            output_len=workload.output_len,
        )
        self._process.stdin.write(msgspec.json.encode(job).decode() + "\n")
        self._process.stdin.flush()
        return read_answer(iter(self._process.stdout.readline, ""))

    def stop(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def _sample(server: ServerProcess, seconds: int, out: Path, keep_loaded: Callable[[threading.Event], None]) -> None:
    """py-spy ``record`` of ``server``'s frontend process for ``seconds`` while ``keep_loaded`` sends requests."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    stop = threading.Event()
    thread = threading.Thread(target=keep_loaded, args=(stop,), daemon=True)
    thread.start()
    try:
        sampling = ["-d", str(seconds), "-r", "250", "--nonblocking", "-f", "raw", "-o", str(out)]
        subprocess.run([py_spy, "record", "-p", str(server.pid), *sampling], check=True, capture_output=True)
    finally:
        stop.set()
        thread.join()


def _has_py_spy() -> bool:
    return shutil.which("py-spy") is not None or Path(sys.executable).with_name("py-spy").exists()


def main(options: RequestProfileOptions, log_dir: Path = RESULTS_DIR / "logs") -> RequestProfile:
    """Run the rounds and the per-stage sample, print the tables, write ``request_profile.json``."""
    build_tiny_models()
    model: ServedModel = served_model(DEMO_PROFILE)
    workloads = _workloads(options)
    log_dir.mkdir(parents=True, exist_ok=True)
    client_log = (log_dir / f"{RESULT}-client.log").open("w")
    servers: dict[str, ServerProcess] = {}
    rows: list[SteadyRound] = []
    floor_rows: list[SteadyRound] = []
    floor: _Floor | None = None
    stages: list[StageSample] = []
    started = time.monotonic()
    try:
        servers["vllm"] = start_vllm(model, log_dir)
        servers["turnout"] = start_turnout(DEMO_PROFILE, log_dir, extra=("--no-preload",))
        floor = _Floor(log_dir)
        for process in servers.values():
            process.wait_ready()

        def run(label: str, workload: Workload, seed: int) -> LoadResult:
            pid = servers[label].pid
            return run_load(
                workload,
                base_url=servers[label].url,
                model_path=model.model.model,
                served_name=model.name,
                server_cpu_seconds=lambda: server_cpu_seconds(pid),
                seed=seed,
                log=client_log,
            )

        for label in SERVERS:  # warm-up, discarded: lazy imports, template compilation, caches
            for workload in workloads:
                run(label, dataclasses.replace(workload, num_prompts=min(32, options.prompts)), seed=999)
        for workload in workloads:
            floor.run(dataclasses.replace(workload, num_prompts=min(32, options.prompts)), seed=999)
        print("round  server   workload                   req/s  TTFT p99  CPU-ms/req", flush=True)
        for round_no in range(1, options.rounds + 1):
            order = SERVERS if round_no % 2 else SERVERS[::-1]
            for workload in workloads:
                for label in (*order, FLOOR):
                    measured = floor.run(workload, round_no) if label == FLOOR else run(label, workload, round_no)
                    print(
                        f"{round_no:>5}  {label:<8} {workload.label:<24} {measured.req_per_s:>7.1f} "
                        f"{measured.ttft_p99_ms or 0:>9.1f} {measured.cpu_ms_per_request:>10.2f}",
                        flush=True,
                    )
                    row = SteadyRound(
                        round=round_no, server=label, workload=workload.label, **msgspec.structs.asdict(measured)
                    )
                    (floor_rows if label == FLOOR else rows).append(row)
        if options.sample_s > 0 and _has_py_spy():
            sampled = workloads[0]  # chat streaming
            for label in SERVERS:

                def keep_loaded(stop: threading.Event, label: str = label) -> None:
                    while not stop.is_set():
                        run(label, sampled, seed=0)

                out = log_dir / f"{RESULT}-{label}.txt"
                _sample(servers[label], options.sample_s, out, keep_loaded)
                samples, shares = stage_shares(out.read_text().splitlines())
                stages.append(StageSample(server=label, workload=sampled.label, samples=samples, shares=shares))
    finally:
        for server_process in servers.values():
            server_process.stop()
        if floor is not None:
            floor.stop()
        client_log.close()
    result = RequestProfile(
        options=options,
        commands={
            "vllm": repo_relative("python -m vllm.entrypoints.openai.api_server " + " ".join(model.vllm_arguments())),
            "turnout": f"turnout serve {DEMO_PROFILE.relative_to(DEMO_PROFILE.parents[1])} --no-preload",
        },
        seconds=round(time.monotonic() - started, 1),
        rounds=rows,
        summary=summarize(rows, workloads),
        paired_cpu=paired_cpu(rows, [workload.label for workload in workloads]),
        floor=floor_rows,
        stages=stages,
    )
    print("\n".join(page_section(result)))
    print(f"wrote {write_result(RESULT, result)}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    given = RequestProfileOptions()  # the defaults, stated once on the Struct
    for name in ("rounds", "rate", "prompts", "concurrency", "sample_s"):
        default = getattr(given, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    parsed = vars(parser.parse_args())
    main(RequestProfileOptions(**parsed))
    sys.exit(0)
