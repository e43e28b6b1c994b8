"""The floor at a fixed request rate: vLLM's ``AsyncLLM`` in this process, no HTTP, no frontend (a child process).

    .venv/bin/python -m benchmarks.engine_floor      # started by ``benchmarks.request_profile``, fed on stdin

Whatever serves vLLM's engine in its own process pays this much per request: the engine client's output
processing and detokenizing, its ZMQ socket and the event loop under it. ``benchmarks/engine_limit.py`` measures
it at full speed; ``request_profile`` needs it at the load it compares the servers at, since at a fixed rate an
engine step serves few requests and its per-step costs no longer spread thin. So this process starts the demo's
model with the servers' engine arguments, then reads one job per line on stdin (a :class:`FloorJob` as JSON) and
answers each with one line, :data:`MARK` and a :class:`~benchmarks.result_types.LoadResult` as JSON (vLLM logs on
stdout too). Each job sends random 32-token prompts as token ids (tokenizing is a server's, not the floor's)
with Poisson arrivals at ``rate`` (scaled to end at ``prompts / rate``), at most ``concurrency`` in flight, as
vLLM's client does at ``--request-rate``; ``streaming`` asks for every token as it comes (vLLM's ``DELTA``,
what a streamed response uses), else the final output only (``FINAL_ONLY``, what a JSON response uses). CPU is
this process's alone, not its engine core's.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
import sys
import time
from typing import Any

import msgspec

from benchmarks.result_types import Base, LoadResult
from benchmarks.servers import DEMO_PROFILE, process_cpu_seconds, served_model
from server.engine.runtime.vllm_loader import build_engine_args

__all__ = ["MARK", "FloorJob", "main", "measure", "read_answer", "start_engine"]

#: The prefix of an answer line, which sets it apart from what vLLM logs on stdout.
MARK = "FLOOR "


class FloorJob(Base, frozen=True, kw_only=True):
    """One run of the floor: the shape of ``benchmarks.load.Workload``, at a fixed rate or all at once (``inf``)."""

    streaming: bool
    rate: float
    prompts: int
    concurrency: int
    seed: int
    input_len: int = 32
    output_len: int = 8


def read_answer(lines: Any) -> LoadResult:
    """The first answer among ``lines`` (a child's stdout, read line by line); EOF before one is an error."""
    for line in lines:
        if line.startswith(MARK):
            return msgspec.json.decode(line[len(MARK) :], type=LoadResult)
    raise RuntimeError("the floor's process ended before it answered")


def start_engine() -> Any:
    """vLLM's ``AsyncLLM`` for the demo's served model, with the servers' engine arguments."""
    from vllm.v1.engine.async_llm import AsyncLLM

    model = served_model(DEMO_PROFILE)
    return AsyncLLM.from_engine_args(build_engine_args(model.name, model.model))


async def measure(engine: Any, job: FloorJob) -> LoadResult:
    """Run ``job`` on ``engine`` in this process; an infinite ``rate`` sends every prompt at once (within
    ``concurrency``), as ``benchmarks/engine_limit.py`` does."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    vocab = engine.model_config.get_vocab_size()
    rng = random.Random(job.seed)
    prompts = [[rng.randrange(10, vocab - 1) for _ in range(job.input_len)] for _ in range(job.prompts)]
    # Send times as vLLM's client draws them: Poisson gaps, summed, scaled so the last falls at prompts / rate.
    sends = [0.0] * job.prompts
    if not math.isinf(job.rate):
        sends = list(itertools.accumulate(rng.expovariate(job.rate) for _ in range(job.prompts)))
        sends = [send * job.prompts / job.rate / sends[-1] for send in sends]
    kind = RequestOutputKind.DELTA if job.streaming else RequestOutputKind.FINAL_ONLY
    params = SamplingParams(max_tokens=job.output_len, ignore_eos=True, temperature=0.0, output_kind=kind)
    gate = asyncio.Semaphore(job.concurrency)
    ttfts: list[float] = []

    async def one(index: int) -> None:
        async with gate:
            start = time.perf_counter()
            first = True
            async for _ in engine.generate({"prompt_token_ids": prompts[index]}, params, f"f{job.seed}-{index}"):
                if first:
                    ttfts.append(time.perf_counter() - start)
                    first = False

    cpu_start, wall_start = process_cpu_seconds(os.getpid()), time.perf_counter()
    tasks = []
    for index, send in enumerate(sends):
        await asyncio.sleep(max(0.0, wall_start + send - time.perf_counter()))
        tasks.append(asyncio.create_task(one(index)))
    await asyncio.gather(*tasks)
    wall, cpu = time.perf_counter() - wall_start, process_cpu_seconds(os.getpid()) - cpu_start
    ttfts.sort()
    return LoadResult(
        completed=len(ttfts),
        failed=job.prompts - len(ttfts),
        req_per_s=job.prompts / wall,
        ttft_p50_ms=ttfts[len(ttfts) // 2] * 1000 if ttfts else None,
        ttft_p99_ms=ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))] * 1000 if ttfts else None,
        cpu_ms_per_request=cpu * 1000 / job.prompts,
        first_error=None,
    )


async def _serve() -> None:
    engine = start_engine()
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            result = await measure(engine, msgspec.json.decode(line, type=FloorJob))
            sys.stdout.write(MARK + msgspec.json.encode(result).decode() + "\n")
            sys.stdout.flush()
    finally:
        engine.shutdown()


def main() -> None:
    """Serve jobs from stdin until it closes."""
    asyncio.run(_serve())


if __name__ == "__main__":
    main()
