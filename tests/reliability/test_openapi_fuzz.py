"""Schemathesis against ``/openapi.json`` of a live server: no 5xx, and every error in OpenAI's shape.

Bodies come in two kinds: valid as documented (vLLM's request models; ``model`` is dropped so that the active
model serves them instead of a 404 for a random name) and invalid ones (schemathesis' negative mode).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.api.live_server import LiveServer
from tests.reliability.conftest import ADMIN_TOKEN, Scale

pytestmark = [pytest.mark.engine, pytest.mark.live_server("keep")]

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _problem(status: int, headers: Any, text: str) -> str | None:
    """What is wrong with a response, if anything: a 5xx (but a 503 with Retry-After), or an error not in OpenAI's
    shape."""
    if status >= 500 and not (status == 503 and "retry-after" in {key.lower() for key in headers}):
        return f"{status}: {text[:300]}"
    if status >= 400:
        try:
            error = json.loads(text)["error"]
            assert isinstance(error["message"], str) and "Traceback" not in error["message"]
        except (ValueError, KeyError, TypeError, AssertionError):
            return f"{status} not in OpenAI's error shape: {text[:300]}"
    return None


def _fuzz(
    operation: Any,
    label: str,
    mode: GenerationMode,
    url: str,
    *,
    examples: int,
    calls: dict[str, Counter[int]],
    problems: list[str],
    nothing_to_break: list[str],
) -> None:
    """Send ``examples`` generated requests to ``operation``, noting each problem response (and, in negative
    mode, an operation the fuzzer finds nothing to make invalid in, which is not called)."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        if mode is GenerationMode.POSITIVE and isinstance(case.body, dict) and label != "POST /v1/models/switch":
            case.body.pop("model", None)  # the active model serves it (a random name would only get a 404)
        response = case.call(base_url=url, headers=AUTH, timeout=120)
        calls[label][response.status_code] += 1
        problem = _problem(response.status_code, response.headers, response.text)
        if problem is not None:
            problems.append(f"{label} {json.dumps(case.body)[:400]} -> {problem}")

    try:
        check()
    except Unsatisfiable:
        # Only negative mode, on an operation without a body whose parameters take any value (GET /health, POST
        # /v1/responses/{response_id}/cancel), may find nothing to make invalid. Positive mode must reach every
        # operation, and a body always has something to break: either failing is a schema the fuzzer cannot use.
        if mode is not GenerationMode.NEGATIVE or operation.body:
            raise
        nothing_to_break.append(label)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda mode: mode.value)
def test_fuzzed_requests_get_no_server_error(live: LiveServer, scale: Scale, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json", timeout=30)
    problems: list[str] = []
    calls: dict[str, Counter[int]] = {}
    nothing_to_break: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        label = f"{operation.method.upper()} {operation.path}"
        calls[label] = Counter()
        _fuzz(
            operation,
            label,
            mode,
            live.url,
            examples=12 if scale.name == "short" else 150,  # the long version (just bench) draws more
            calls=calls,
            problems=problems,
            nothing_to_break=nothing_to_break,
        )
    print(f"\nschemathesis {mode.value}: " + "; ".join(f"{label}: {dict(count)}" for label, count in calls.items()))
    print(f"nothing to make invalid in: {', '.join(nothing_to_break) or 'none'}")
    for problem in problems:
        print(f"PROBLEM {problem}")
    assert problems == [], "\n".join(problems[:20])
    # Every operation was called, but those the fuzzer could not make an invalid request for (negative mode,
    # no body: checked where they are noted), which are not counted as called; most operations are.
    uncalled = {label for label, count in calls.items() if not count}
    assert uncalled == set(nothing_to_break), (uncalled, nothing_to_break)
    assert len(uncalled) < len(calls) / 2, uncalled
    assert "POST /v1/chat/completions" in calls and "POST /v1/models/switch" in calls
