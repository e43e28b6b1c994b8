"""The limit: vLLM's ``AsyncLLM`` driven in-process, with no HTTP server and no OpenAI frontend at all.

    .venv/bin/python -m benchmarks.engine_limit [--prompts 200] [--concurrency 1,16,64]

Same model and engine arguments as the steady-state benchmark, random 32-token prompts given as token ids, 8
tokens out (``ignore_eos``), greedy. It reports req/s and this process's CPU milliseconds per request: what is
left there is AsyncLLM's own client side (output processing, detokenizing), which any server pays too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections.abc import Callable
from typing import Any

from benchmarks.result_types import EngineLimit, EngineLimitOptions, LimitFigures, LimitRound
from benchmarks.results import write_result
from benchmarks.servers import DEMO_PROFILE, process_cpu_seconds, served_model
from server.engine.runtime.vllm_loader import build_engine_args
from server.tinymodels.builder import build_tiny_models

__all__ = ["main"]


async def _measure(
    engine: Any, round_no: int, concurrency: int, prompts: int, input_len: int, output_len: int
) -> LimitRound:
    from vllm import SamplingParams

    vocab = engine.model_config.get_vocab_size()
    rng = random.Random(concurrency)
    params = SamplingParams(max_tokens=output_len, ignore_eos=True, temperature=0.0)
    gate = asyncio.Semaphore(concurrency)
    ttfts: list[float] = []

    async def one(index: int) -> None:
        token_ids = [rng.randrange(10, vocab - 1) for _ in range(input_len)]
        async with gate:
            start = time.perf_counter()
            first = True
            async for _ in engine.generate({"prompt_token_ids": token_ids}, params, f"limit-{concurrency}-{index}"):
                if first:
                    ttfts.append(time.perf_counter() - start)
                    first = False

    cpu_start, wall_start = process_cpu_seconds(os.getpid()), time.perf_counter()
    await asyncio.gather(*(one(index) for index in range(prompts)))
    wall, cpu = time.perf_counter() - wall_start, process_cpu_seconds(os.getpid()) - cpu_start
    ttfts.sort()
    return LimitRound(
        round=round_no,
        concurrency=concurrency,
        requests=prompts,
        req_per_s=prompts / wall,
        ttft_p50_ms=ttfts[len(ttfts) // 2] * 1000,
        ttft_p99_ms=ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))] * 1000,
        cpu_ms_per_request=cpu * 1000 / prompts,
    )


async def _run(prompts: int, concurrency: tuple[int, ...], rounds: int) -> list[LimitRound]:
    from vllm.v1.engine.async_llm import AsyncLLM

    build_tiny_models()
    model = served_model(DEMO_PROFILE)
    engine = AsyncLLM.from_engine_args(build_engine_args(model.name, model.model))
    rows: list[LimitRound] = []
    try:
        await _measure(engine, 0, 16, 32, 32, 8)  # warm-up, discarded
        print("round  concurrency    req/s  TTFT p50  TTFT p99  CPU-ms/req", flush=True)
        for round_no in range(1, rounds + 1):
            for c in concurrency:
                row = await _measure(engine, round_no, c, prompts, 32, 8)
                rows.append(row)
                print(
                    f"{round_no:>5}  {c:>11} {row.req_per_s:>8.1f} {row.ttft_p50_ms:>9.1f} "
                    f"{row.ttft_p99_ms:>9.1f} {row.cpu_ms_per_request:>11.2f}",
                    flush=True,
                )
    finally:
        engine.shutdown()
    return rows


def _median(rows: list[LimitRound], read: Callable[[LimitRound], float]) -> float:
    """The upper median (an actual run's figure, as the page has always shown)."""
    values = sorted(read(row) for row in rows)
    return values[len(values) // 2]


def main(options: EngineLimitOptions | None = None) -> EngineLimit:
    """Measure the in-process limit, print it and write ``engine_limit.json``."""
    options = options or EngineLimitOptions()
    rows = asyncio.run(_run(options.prompts, options.concurrency, options.rounds))
    medians = {}
    for c in options.concurrency:
        mine = [row for row in rows if row.concurrency == c]
        medians[f"c{c}"] = LimitFigures(
            req_per_s=_median(mine, lambda row: row.req_per_s),
            ttft_p50_ms=_median(mine, lambda row: row.ttft_p50_ms),
            ttft_p99_ms=_median(mine, lambda row: row.ttft_p99_ms),
            cpu_ms_per_request=_median(mine, lambda row: row.cpu_ms_per_request),
        )
    result = EngineLimit(config=options, rounds=rows, medians=medians)
    print(f"wrote {write_result('engine_limit', result)}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = EngineLimitOptions()
    parser.add_argument("--prompts", type=int, default=defaults.prompts)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument(
        "--concurrency", type=lambda s: tuple(int(c) for c in s.split(",")), default=defaults.concurrency
    )
    given = parser.parse_args()
    main(EngineLimitOptions(prompts=given.prompts, concurrency=given.concurrency, rounds=given.rounds))
