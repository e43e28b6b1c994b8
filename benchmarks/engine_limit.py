"""The limit: vLLM's ``AsyncLLM`` driven in-process, with no HTTP server and no OpenAI frontend at all.

    .venv/bin/python -m benchmarks.engine_limit [--prompts 200] [--concurrency 1,16,64]

Same model and engine arguments as the steady-state benchmark, random 32-token prompts given as token ids, 8
tokens out (``ignore_eos``), greedy, each token asked for as it comes (a streamed response's ``DELTA``). It
reports req/s and this process's CPU milliseconds per request: what is left there is AsyncLLM's own client side
(output processing, detokenizing), which any server pays too. The runs are ``benchmarks/engine_floor.py``'s, at
full speed; ``request_profile`` runs that floor at its fixed rate.
"""

from __future__ import annotations

import argparse
import asyncio
import math
from collections.abc import Callable

from benchmarks.engine_floor import FloorJob, measure, start_engine
from benchmarks.result_types import EngineLimit, EngineLimitOptions, LimitFigures, LimitRound
from benchmarks.results import write_result
from server.tinymodels.builder import build_tiny_models

__all__ = ["main"]


async def _run(prompts: int, concurrency: tuple[int, ...], rounds: int) -> list[LimitRound]:
    build_tiny_models()
    engine = start_engine()
    rows: list[LimitRound] = []
    try:
        await measure(engine, _job(16, 32, seed=0))  # warm-up, discarded
        print("round  concurrency    req/s  TTFT p50  TTFT p99  CPU-ms/req", flush=True)
        for round_no in range(1, rounds + 1):
            for c in concurrency:
                measured = await measure(engine, _job(c, prompts, seed=c))
                row = LimitRound(
                    round=round_no,
                    concurrency=c,
                    requests=prompts,
                    req_per_s=measured.req_per_s,
                    ttft_p50_ms=measured.ttft_p50_ms or 0.0,
                    ttft_p99_ms=measured.ttft_p99_ms or 0.0,
                    cpu_ms_per_request=measured.cpu_ms_per_request,
                )
                rows.append(row)
                print(
                    f"{round_no:>5}  {c:>11} {row.req_per_s:>8.1f} {row.ttft_p50_ms:>9.1f} "
                    f"{row.ttft_p99_ms:>9.1f} {row.cpu_ms_per_request:>11.2f}",
                    flush=True,
                )
    finally:
        engine.shutdown()
    return rows


def _job(concurrency: int, prompts: int, *, seed: int) -> FloorJob:
    """Every prompt at once, ``concurrency`` in flight, each token as it comes (as a streamed response asks)."""
    return FloorJob(streaming=True, rate=math.inf, prompts=prompts, concurrency=concurrency, seed=seed)


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
