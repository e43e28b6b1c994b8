"""Mixed OpenAI traffic against a live server, with every request classified by how it ended.

Outcomes (the load-and-fault suite's goal is 0 ``lost``, 0 ``wrong``, 0 ``failed``):
    * ``completed``: answered in full by the model it asked for (or, without ``model``, by the model the response
      names), with that model's greedy answer;
    * ``refused``: a documented refusal: a 503 with ``Retry-After`` and an OpenAI error body, a stream that ends
      with an error event naming the switch (or one of the codes a fault test expects, such as ``engine_died``),
      or (manual mode) a 409 ``model_not_active``;
    * ``lost``: hung past the client's timeout, cut without an error event or ``[DONE]``, or answered with a
      partial (``finish_reason: abort``) result;
    * ``wrong``: answered by another model than the one it was admitted to;
    * ``failed``: any other answer (a 5xx other than a 503 with ``Retry-After``, a 4xx for a valid request).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

__all__ = [
    "ANSWERS",
    "Outcome",
    "RequestSpec",
    "Result",
    "SwitchLog",
    "TrafficReport",
    "classify_json",
    "classify_stream",
    "mixed_requests",
    "run_traffic",
    "send",
]

Outcome = Literal["completed", "refused", "lost", "wrong", "failed"]
OUTCOMES: tuple[Outcome, ...] = ("completed", "refused", "lost", "wrong", "failed")

#: What each demo model answers greedily to a chat that offers no tools (server.tinymodels.spec).
ANSWERS = {"tools": "Hello from tiny-tools.", "plain": "Hello from tiny-plain."}
#: The switch's own refusal codes: a stream error event or a 503 body with one of these names the switch.
SWITCH_CODES = frozenset({"model_switched", "model_switching", "switch_in_progress"})
HELLO = [{"role": "user", "content": "Hello!"}]


@dataclass(frozen=True)
class RequestSpec:
    """One request of the mix.

    Attributes:
        api: ``chat`` or ``completion``.
        stream: Ask for SSE.
        model: The model named in the body; None lets the server pick the active one (chat only).
        long: Generate many tokens (``ignore_eos``), so the request is still running when a switch drains.
        long_tokens: How many a long request generates (more where a warm engine must still be at it seconds later).
    """

    api: Literal["chat", "completion"]
    stream: bool
    model: str | None
    long: bool = False
    long_tokens: int = 160

    def body(self, prompts: Mapping[str, str]) -> dict[str, Any]:
        """The JSON body; ``prompts`` holds each model's rendered chat prompt for the completions API."""
        body: dict[str, Any] = {
            "temperature": 0,
            "max_tokens": self.long_tokens if self.long else 16,
            "stream": self.stream,
        }
        if self.long:
            body["ignore_eos"] = True
        if self.model is not None:
            body["model"] = self.model
        if self.api == "chat":
            body["messages"] = HELLO
        else:
            assert self.model is not None, "completions name their model: the prompt is rendered for it"
            body["prompt"] = prompts[self.model]
        return body

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"


@dataclass(frozen=True)
class Result:
    """How one request ended: its outcome, a short reason, the model that answered (when one did), how long it
    took and when it ended (``time.monotonic()``)."""

    spec: RequestSpec
    outcome: Outcome
    reason: str
    answered_by: str | None = None
    seconds: float = 0.0
    ended_at: float = 0.0


@dataclass(frozen=True)
class SwitchLog:
    """One admin switch: the target, the HTTP status and the report's or error's summary."""

    target: str
    status: int
    detail: str


@dataclass
class TrafficReport:
    """Every request's result and every switch made while the traffic ran."""

    results: list[Result] = field(default_factory=list)
    switches: list[SwitchLog] = field(default_factory=list)
    seconds: float = 0.0

    @classmethod
    def merged(cls, reports: Sequence[TrafficReport]) -> TrafficReport:
        """One report of several runs, one after another."""
        return cls(
            results=[result for report in reports for result in report.results],
            switches=[log for report in reports for log in report.switches],
            seconds=sum(report.seconds for report in reports),
        )

    def counts(self) -> dict[str, int]:
        """``{outcome: count}`` for every outcome (zeros included)."""
        counted = Counter(result.outcome for result in self.results)
        return {outcome: counted.get(outcome, 0) for outcome in OUTCOMES}

    def reasons(self, outcome: Outcome) -> Counter[str]:
        """How often each reason came up for ``outcome``."""
        return Counter(result.reason for result in self.results if result.outcome == outcome)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: counts, reasons of everything not completed, and the switches."""
        return {
            "requests": len(self.results),
            "seconds": round(self.seconds, 1),
            "counts": self.counts(),
            "reasons": {outcome: dict(self.reasons(outcome)) for outcome in OUTCOMES if outcome != "completed"},
            "switches": [f"{log.target}: {log.status} {log.detail}" for log in self.switches],
        }


def _error(payload: Any) -> dict[str, Any] | None:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        error: dict[str, Any] = payload["error"]
        return error
    return None


def _judge_answer(spec: RequestSpec, answered_by: Any, text: str, finish: Any) -> tuple[Outcome, str, str | None]:
    """The outcome of a complete answer: right model and its greedy answer, or wrong, or cut short."""
    if not isinstance(answered_by, str) or answered_by not in ANSWERS:
        return "failed", f"unknown model {answered_by!r} in the response", None
    if spec.model is not None and answered_by != spec.model:
        return "wrong", f"asked {spec.model}, response names {answered_by}", answered_by
    if finish == "abort":
        return "lost", "partial answer (finish_reason abort)", answered_by
    expected = ANSWERS[answered_by]
    if not text.startswith(expected):
        others = [name for name, answer in ANSWERS.items() if name != answered_by and text.startswith(answer)]
        where = f"the answer of {others[0]}" if others else f"{text[:40]!r}"
        return "wrong", f"{answered_by} answered with {where}", answered_by
    return "completed", "ok", answered_by


def classify_json(spec: RequestSpec, status: int, headers: Mapping[str, str], payload: Any) -> Result:
    """Classify a non-streaming answer (or a refusal of a streaming request before it started)."""
    error = _error(payload)
    if status == 200 and error is None and isinstance(payload, dict):
        choices = payload.get("choices") or [{}]
        choice = choices[0]
        text = choice.get("text") if spec.api == "completion" else (choice.get("message") or {}).get("content")
        outcome, reason, model = _judge_answer(spec, payload.get("model"), text or "", choice.get("finish_reason"))
        return Result(spec, outcome, reason, model)
    if error is None:
        return Result(spec, "failed", f"{status} without an OpenAI error body")
    code = error.get("code")
    if status == 503:
        if "retry-after" not in {key.lower() for key in headers}:
            return Result(spec, "failed", f"503 {code} without Retry-After")
        return Result(spec, "refused", f"503 {code}")
    if status == 409 and code == "model_not_active":
        return Result(spec, "refused", "409 model_not_active")
    return Result(spec, "failed", f"{status} {code}: {str(error.get('message'))[:120]}")


def classify_stream(
    spec: RequestSpec, events: Sequence[str], *, ended: bool, expected: frozenset[str] = frozenset()
) -> Result:
    """Classify an SSE answer from its ``data:`` payloads; ``ended`` is False when the connection broke.

    ``expected``: stream error codes that count as refusals besides the switch's (a fault the test causes).
    """
    text: list[str] = []
    model: Any = None
    finish: Any = None
    for index, event in enumerate(events):
        if event == "[DONE]":
            if index != len(events) - 1:
                return Result(spec, "failed", "events after [DONE]")
            outcome, reason, answered_by = _judge_answer(spec, model, "".join(text), finish)
            return Result(spec, outcome, reason, answered_by)
        try:
            chunk = json.loads(event)
        except ValueError:
            return Result(spec, "failed", f"an event that is not JSON: {event[:60]!r}")
        error = _error(chunk)
        if error is not None:
            code = str(error.get("code"))
            done = index + 1 < len(events) and events[index + 1] == "[DONE]"
            if code in expected or (code in SWITCH_CODES and "switch" in str(error.get("message", ""))):
                if not done:
                    return Result(spec, "lost", f"stream error {code} without [DONE]")
                return Result(spec, "refused", f"stream error {code}")
            return Result(spec, "failed", f"stream error {code}: {str(error.get('message'))[:120]}")
        model = chunk.get("model", model)
        for choice in chunk.get("choices") or []:
            piece = choice.get("text") if spec.api == "completion" else (choice.get("delta") or {}).get("content")
            text.append(piece or "")
            finish = choice.get("finish_reason") or finish
    return Result(spec, "lost", "stream cut without [DONE]" if ended else "connection broke mid-stream")


async def send(
    client: httpx.AsyncClient,
    spec: RequestSpec,
    prompts: Mapping[str, str],
    timeout: float,
    expected: frozenset[str] = frozenset(),
) -> Result:
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            result = await _exchange(client, spec, prompts, expected)
    except TimeoutError:
        result = Result(spec, "lost", f"hung for {timeout:.0f}s")
    except httpx.HTTPError as exc:
        result = Result(spec, "lost", f"{type(exc).__name__}")
    ended = time.monotonic()
    return Result(result.spec, result.outcome, result.reason, result.answered_by, ended - started, ended)


async def _exchange(
    client: httpx.AsyncClient, spec: RequestSpec, prompts: Mapping[str, str], expected: frozenset[str]
) -> Result:
    async with client.stream("POST", spec.path, json=spec.body(prompts)) as response:
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        if not (spec.stream and response.status_code == 200 and is_sse):
            raw = await response.aread()
            try:
                payload = json.loads(raw)
            except ValueError:
                return Result(spec, "failed", f"{response.status_code} with a body that is not JSON")
            return classify_json(spec, response.status_code, response.headers, payload)
        events: list[str] = []
        try:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(line[len("data: ") :])
        except httpx.HTTPError:
            return classify_stream(spec, events, ended=False, expected=expected)
        return classify_stream(spec, events, ended=True, expected=expected)


def mixed_requests(
    count: int, models: Sequence[str], *, seed: int = 0, allow_default: bool = True
) -> list[RequestSpec]:
    """``count`` requests: chat and completions, streaming and not, for each of ``models``; a fifth run long.

    With ``allow_default``, a sixth of the chat requests name no model (the server picks the active one).
    """
    rng = random.Random(seed)
    specs = []
    for _ in range(count):
        api: Literal["chat", "completion"] = "chat" if rng.random() < 0.6 else "completion"
        model: str | None = rng.choice(list(models))
        if api == "chat" and allow_default and rng.random() < 1 / 6:
            model = None
        specs.append(RequestSpec(api=api, stream=rng.random() < 0.5, model=model, long=rng.random() < 0.2))
    return specs


async def _switches(
    client: httpx.AsyncClient,
    targets: Sequence[str],
    *,
    admin_token: str,
    results: list[Result],
    total: int,
    drain_timeout: float,
    log: list[SwitchLog],
) -> None:
    """Switch to each target in turn, the i-th once i/(n+1) of the traffic has its result, so each runs under load,
    and once a request has completed since the switch before (or the traffic is over): a switch that outlasts the
    traffic's pace (an engine start on a loaded machine, 30 s) must not leave the next ones back to back, aborting
    what it admitted before anything could be served by its model."""
    since = 0
    for index, target in enumerate(targets, start=1):
        while len(results) < total and not (
            len(results) >= index * total / (len(targets) + 1)
            and any(result.outcome == "completed" for result in results[since:])
        ):
            await asyncio.sleep(0.05)
        try:
            response = await client.post(
                "/v1/models/switch",
                json={"model": target, "drain_timeout": drain_timeout},
                headers={"Authorization": f"Bearer {admin_token}"},
                timeout=600,
            )
        except httpx.HTTPError as exc:
            log.append(SwitchLog(target, 0, type(exc).__name__))
            continue
        body = response.json()
        if response.status_code == 200:
            detail = f"{body.get('previous_model')}->{body.get('current_model')} {body.get('duration_ms')} ms, " + (
                f"{body.get('aborted_requests')} aborted"
            )
        else:
            detail = str((_error(body) or {}).get("code"))
        log.append(SwitchLog(target, response.status_code, detail))
        since = len(results)


async def run_traffic(
    base_url: str,
    specs: Sequence[RequestSpec],
    *,
    prompts: Mapping[str, str],
    switch_targets: Sequence[str] = (),
    admin_token: str = "",
    drain_timeout: float = 1.0,
    concurrency: int = 16,
    request_timeout: float = 180.0,
    expected_errors: frozenset[str] = frozenset(),
) -> TrafficReport:
    """Send ``specs`` with ``concurrency`` clients while an admin switches through ``switch_targets``.

    The switches are spread over the traffic (each waits for the one before to return): the i-th starts once
    i/(n+1) of the requests have their result and one has completed since the switch before (:func:`_switches`).
    ``expected_errors``: stream error codes that count as refusals (see :func:`classify_stream`).
    """
    report = TrafficReport()
    queue: asyncio.Queue[RequestSpec] = asyncio.Queue()
    for spec in specs:
        queue.put_nowait(spec)
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=base_url, timeout=request_timeout, limits=limits) as client:

        async def worker() -> None:
            while not queue.empty():
                spec = queue.get_nowait()
                report.results.append(await send(client, spec, prompts, request_timeout, expected_errors))

        switching = asyncio.create_task(
            _switches(
                client,
                switch_targets,
                admin_token=admin_token,
                results=report.results,
                total=len(specs),
                drain_timeout=drain_timeout,
                log=report.switches,
            )
        )
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        await switching
    report.seconds = time.monotonic() - started
    return report
