"""The traffic classifier itself: each way a request can end lands in the right outcome (no server needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.reliability.traffic import RequestSpec, classify_json, classify_stream

CHAT = RequestSpec(api="chat", stream=False, model="tools")
ANY_CHAT = RequestSpec(api="chat", stream=True, model=None)
COMPLETION = RequestSpec(api="completion", stream=True, model="plain")


def _chat(model: str, content: str, finish: str = "stop") -> dict[str, Any]:
    return {"model": model, "choices": [{"message": {"content": content}, "finish_reason": finish}]}


def _error(code: str, message: str = "m") -> dict[str, Any]:
    return {"error": {"message": message, "type": "T", "param": None, "code": code}}


def _events(model: str, pieces: list[str], *, finish: str = "stop", api: str = "chat") -> list[str]:
    key = "delta" if api == "chat" else None
    events = []
    for piece in pieces:
        choice = {"delta": {"content": piece}} if key else {"text": piece}
        events.append(json.dumps({"model": model, "choices": [{**choice, "finish_reason": None}]}))
    events.append(json.dumps({"model": model, "choices": [{"delta": {}, "text": "", "finish_reason": finish}]}))
    return events


@pytest.mark.parametrize(
    ("status", "headers", "payload", "outcome"),
    [
        (200, {}, _chat("tools", "Hello from tiny-tools."), "completed"),
        (200, {}, _chat("plain", "Hello from tiny-plain."), "wrong"),
        (200, {}, _chat("tools", "Hello from tiny-plain."), "wrong"),
        (200, {}, _chat("tools", "Hello from tiny"), "wrong"),
        (200, {}, _chat("tools", "Hello from tiny-tools.", finish="abort"), "lost"),
        (503, {"Retry-After": "1"}, _error("model_switched"), "refused"),
        (503, {}, _error("model_switched"), "failed"),
        (409, {}, _error("model_not_active"), "refused"),
        (409, {}, _error("switch_conflict"), "failed"),
        (500, {}, _error("internal_error"), "failed"),
        (502, {}, {"detail": "bad gateway"}, "failed"),
    ],
)
def test_json_answers(status: int, headers: dict[str, str], payload: Any, outcome: str) -> None:
    assert classify_json(CHAT, status, headers, payload).outcome == outcome


def test_a_request_without_a_model_is_judged_by_the_model_that_answered() -> None:
    right = classify_stream(ANY_CHAT, [*_events("plain", ["Hello from ", "tiny-plain."]), "[DONE]"], ended=True)
    assert (right.outcome, right.answered_by) == ("completed", "plain")
    wrong = classify_stream(ANY_CHAT, [*_events("plain", ["Hello from tiny-tools."]), "[DONE]"], ended=True)
    assert wrong.outcome == "wrong"


@pytest.mark.parametrize(
    ("events", "ended", "outcome"),
    [
        ([*_events("plain", ["Hello from tiny-plain."], api="completion"), "[DONE]"], True, "completed"),
        ([*_events("tools", ["Hello from tiny-tools."], api="completion"), "[DONE]"], True, "wrong"),
        (_events("plain", ["Hello from tiny-plain."], api="completion"), True, "lost"),
        (_events("plain", ["Hello"], api="completion")[:1], False, "lost"),
        ([*_events("plain", ["Hello"], api="completion", finish="abort"), "[DONE]"], True, "lost"),
        ([json.dumps(_error("model_switched", "switched from 'plain'")), "[DONE]"], True, "refused"),
        ([json.dumps(_error("model_switched", "switched from 'plain'"))], False, "lost"),
        ([json.dumps(_error("engine_error", "boom")), "[DONE]"], True, "failed"),
        (["not json", "[DONE]"], True, "failed"),
        ([], True, "lost"),
    ],
)
def test_stream_answers(events: list[str], ended: bool, outcome: str) -> None:
    assert classify_stream(COMPLETION, events, ended=ended).outcome == outcome
