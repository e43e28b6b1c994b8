"""``turnout simulate --live URL``: the trace replayed against a running server, measured as the simulation
reports it (policy name ``live``).

Each request is sent at its time in the trace divided by ``--speed``, as a streamed ``/v1/completions`` request
for its model with a prompt of about ``prompt_tokens`` tokens and ``max_tokens`` set to ``output_tokens``, all of
which it generates (``ignore_eos``: the model's end of text does not cut it shorter than the trace). Its wait
is the time to its first streamed data event (admission and the prefill: the closest a client sees to the wait
the simulation counts); a refusal is an answer other than 200. The switches and their seconds per model are the
server's own (``turnout_switch_duration_seconds`` on ``/metrics``, its count and sum per target, read before and
after with the admin token), and the serving share is the share of the replay's time a model had a request
streaming. The admin token and the API key are read as ``turnout status`` and ``turnout serve`` read them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from server.engine import Outcome, Tally, TraceRequest

__all__ = ["replay"]

_METRIC = "turnout_switch_duration_seconds"


def _switch_totals(base: str, headers: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Per target model: successful switches counted and their seconds, as the server's metrics say now."""
    text = httpx.get(f"{base}/metrics", headers=headers, timeout=30.0).raise_for_status().text
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != _METRIC:
            continue
        for sample in family.samples:
            if sample.labels.get("outcome") != "ok" or not sample.name.endswith(("_count", "_sum")):
                continue
            entry = totals.setdefault(sample.labels.get("to", ""), [0.0, 0.0])
            entry[0 if sample.name.endswith("_count") else 1] += sample.value
    return {model: (count, seconds) for model, (count, seconds) in totals.items()}


async def _one(
    client: httpx.AsyncClient,
    request: TraceRequest,
    start: float,
    speed: float,
    tally: Tally,
    spans: list[tuple[str, float, float]],
) -> None:
    await asyncio.sleep(max(0.0, start + request.at / speed - time.monotonic()))
    sent = time.monotonic()
    tally.requests[request.model] += 1
    body = {
        "model": request.model,
        "prompt": "hello " * max(1, request.prompt_tokens),
        "max_tokens": max(1, request.output_tokens),
        # The trace's output tokens were generated: so are the replay's, where the model would stop sooner.
        "ignore_eos": True,
        "stream": True,
    }
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                tally.refused[request.model] += 1
                return
            first: float | None = None
            async for line in response.aiter_lines():
                # The server may send SSE comments while the request waits for its model: only data counts.
                if first is None and line.startswith("data:"):
                    first = time.monotonic()
                    tally.waits[request.model].append(first - sent)
            spans.append((request.model, first or sent, time.monotonic()))
    except httpx.HTTPError:
        tally.refused[request.model] += 1


def _serving(spans: Sequence[tuple[str, float, float]], models: Sequence[str], tally: Tally) -> None:
    """Fill the serving seconds: per model, and of any model, the union of the streaming spans."""
    for name in [*models, None]:
        chosen = sorted((begin, end) for model, begin, end in spans if name is None or model == name)
        total, reach = 0.0, float("-inf")
        for begin, end in chosen:
            total += max(0.0, end - max(begin, reach))
            reach = max(reach, end)
        if name is None:
            tally.any_serving_s = total
        else:
            tally.serving_s[name] = total


def replay(
    url: str,
    trace: Sequence[TraceRequest],
    models: Sequence[str],
    *,
    speed: float,
    admin: str | None,
    key: str | None,
) -> Outcome:
    """Replay ``trace`` (its requests for ``models``) against the server at ``url`` with the admin token ``admin``
    (for ``/metrics``) and the API key ``key``; see the module docstring."""
    base = url.rstrip("/")
    admin_headers = {"Authorization": f"Bearer {admin}"} if admin else {}
    before = _switch_totals(base, admin_headers)
    tally = Tally(models)
    spans: list[tuple[str, float, float]] = []
    wanted = [item for item in trace if item.model in models]

    async def run() -> float:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=None, limits=limits) as client:
            start = time.monotonic()
            await asyncio.gather(*(_one(client, item, start, speed, tally, spans) for item in wanted))
            return time.monotonic() - start

    duration = asyncio.run(run())
    after = _switch_totals(base, admin_headers)
    for model in models:
        count, seconds = after.get(model, (0.0, 0.0))
        earlier = before.get(model, (0.0, 0.0))
        tally.switches[model] = int(count - earlier[0])
        tally.switch_s[model] = seconds - earlier[1]
    _serving(spans, models, tally)
    return tally.outcome(duration)
