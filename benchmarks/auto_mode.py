"""Auto mode through the real server: two models' requests interleaved, switches made by the server itself.

    .venv/bin/python -m benchmarks.auto_mode [--requests 120] [--concurrency 8] [--blocks 1,10,40]

``turnout serve`` runs the demo profile with ``switching.mode: auto`` (strategy ``keep``: both tiny models stay
resident once loaded). A client sends chat requests (half streaming) naming ``tools`` or ``plain``, interleaved in
blocks of N requests per model, at a fixed concurrency. The demo models answer with their own names, so every
answer is checked for the model it came from. It uses only the server's public API, so it measures whatever
scheduler serves auto mode.

Per block size: req/s, latency p50/p99, switches (active-model changes seen on ``/health``), and the requests
completed, refused with a retryable error (429/503), lost (hung, cut, or another error) and answered by the
wrong model. Goal: 0 lost, 0 wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx
from ruamel.yaml import YAML

from benchmarks.result_types import AutoMode, AutoModeConfig, AutoModeOptions, AutoRow
from benchmarks.results import RESULTS_DIR, write_result
from benchmarks.servers import DEMO_PROFILE, start_turnout
from server.tinymodels.builder import build_tiny_models

__all__ = ["auto_profile", "main"]

MODELS = ("tools", "plain")
ANSWERS = {"tools": "Hello from tiny-tools.", "plain": "Hello from tiny-plain."}
_REQUEST_TIMEOUT = 120.0
#: The profile's strategy: both tiny models stay resident once loaded.
STRATEGY = "keep"


def auto_profile(target: Path, source: Path = DEMO_PROFILE) -> Path:
    """Write ``source`` with ``switching.mode: auto`` to ``target`` (its relative paths made absolute)."""
    yaml = YAML(typ="rt")
    data = yaml.load(source.read_text())
    for model in data["models"].values():
        for key in ("model", "chat_template"):
            if key in model:
                model[key] = str((source.parent / model[key]).resolve())
    data["switching"]["mode"] = "auto"
    data["switching"]["strategy"] = STRATEGY
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w") as file:
        yaml.dump(data, file)
    return target


async def _one(client: httpx.AsyncClient, model: str, stream: bool) -> tuple[str, float]:
    """Send one chat; returns (outcome, seconds) with outcome ``ok``, ``refused``, ``lost`` or ``wrong``."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 16,
        "temperature": 0,
        "stream": stream,
    }
    start = time.perf_counter()
    try:
        if stream:
            text, done = "", False
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    return ("refused" if response.status_code in (429, 503) else "lost"), time.perf_counter() - start
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line.removeprefix("data: ")
                    if payload == "[DONE]":
                        done = True
                        break
                    event = json.loads(payload)
                    if "error" in event:
                        code = event["error"].get("code")
                        retryable = code in (429, 503) or event["error"].get("type") == "ServiceUnavailableError"
                        return ("refused" if retryable else "lost"), time.perf_counter() - start
                    for choice in event.get("choices", []):
                        text += choice.get("delta", {}).get("content") or ""
            if not done:
                return "lost", time.perf_counter() - start
        else:
            response = await client.post("/v1/chat/completions", json=body)
            if response.status_code != 200:
                return ("refused" if response.status_code in (429, 503) else "lost"), time.perf_counter() - start
            text = response.json()["choices"][0]["message"]["content"] or ""
    except (httpx.HTTPError, json.JSONDecodeError, KeyError):
        return "lost", time.perf_counter() - start
    outcome = "ok" if text.strip().startswith(ANSWERS[model]) else "wrong"
    return outcome, time.perf_counter() - start


async def _watch_switches(client: httpx.AsyncClient, stop: asyncio.Event) -> list[str]:
    """The sequence of active models seen on /health (polled every 20 ms)."""
    seen: list[str] = []
    while not stop.is_set():
        try:
            active = (await client.get("/health")).json().get("active_model")
        except (httpx.HTTPError, ValueError):
            active = None
        if active and (not seen or seen[-1] != active):
            seen.append(active)
        await asyncio.sleep(0.02)
    return seen


async def _traffic(url: str, requests: int, concurrency: int, block: int) -> AutoRow:
    plan = [(MODELS[(index // block) % 2], index % 2 == 0) for index in range(requests)]
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=_REQUEST_TIMEOUT, limits=limits) as client:
        gate = asyncio.Semaphore(concurrency)
        stop = asyncio.Event()
        watcher = asyncio.create_task(_watch_switches(client, stop))

        async def send(model: str, stream: bool) -> tuple[str, float]:
            async with gate:
                return await _one(client, model, stream)

        start = time.perf_counter()
        results = await asyncio.gather(*(send(model, stream) for model, stream in plan))
        wall = time.perf_counter() - start
        stop.set()
        seen = await watcher
    latencies = sorted(seconds for outcome, seconds in results if outcome == "ok")
    counts = {outcome: sum(1 for o, _ in results if o == outcome) for outcome in ("ok", "refused", "lost", "wrong")}
    return AutoRow(
        block=block,
        requests=requests,
        concurrency=concurrency,
        req_per_s=counts["ok"] / wall,
        latency_p50_ms=latencies[len(latencies) // 2] * 1000 if latencies else float("nan"),
        latency_p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
        if latencies
        else float("nan"),
        switches_seen=max(len(seen) - 1, 0),
        **counts,
    )


def main(options: AutoModeOptions | None = None) -> AutoMode:
    """Run the interleaved traffic per block size, print a table and write ``auto_mode.json``."""
    options = options or AutoModeOptions()
    requests, concurrency = options.requests, options.concurrency
    build_tiny_models()
    log_dir = RESULTS_DIR / "logs"
    profile = auto_profile(log_dir / "auto-mode.yaml")
    server = start_turnout(profile, log_dir, label="turnout-auto")
    rows: list[AutoRow] = []
    try:
        server.wait_ready()
        # Load the second model once, so that every block size sees two resident engines (keep strategy).
        asyncio.run(_traffic(server.url, 4, 2, 2))
        print("block  requests    req/s  p50 ms  p99 ms  switches   ok  refused  lost  wrong", flush=True)
        for block in options.blocks:
            row = asyncio.run(_traffic(server.url, requests, concurrency, block))
            rows.append(row)
            # Live rows hold NaN, not None, where no request was answered, so the format always applies.
            print(
                f"{block:>5} {requests:>9} {row.req_per_s:>8.1f} {row.latency_p50_ms:>7.0f} "
                f"{row.latency_p99_ms:>7.0f} {row.switches_seen:>9} {row.ok:>4} {row.refused:>8} "
                f"{row.lost:>5} {row.wrong:>6}",
                flush=True,
            )
    finally:
        server.stop()
    lost = sum(row.lost for row in rows)
    wrong = sum(row.wrong for row in rows)
    result = AutoMode(
        config=AutoModeConfig(requests=requests, concurrency=concurrency, blocks=options.blocks, strategy=STRATEGY),
        rows=rows,
        goals={"0 lost": lost == 0, "0 wrong model": wrong == 0},
    )
    print(f"lost {lost}, wrong {wrong}; wrote {write_result('auto_mode', result)}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = AutoModeOptions()
    parser.add_argument("--requests", type=int, default=defaults.requests)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--blocks", type=lambda s: tuple(int(b) for b in s.split(",")), default=defaults.blocks)
    given = parser.parse_args()
    main(AutoModeOptions(requests=given.requests, concurrency=given.concurrency, blocks=given.blocks))
