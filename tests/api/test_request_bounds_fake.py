"""A request past its model's bounds (``max_n``, ``max_best_of``, ``max_batch_prompts``) gets a 400 naming the
parameter at once: it is refused before admission, so it never waits for the device nor moves it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from server.engine import EngineManager
from server.profiles.schema import ModelProfile, Switching
from tests.api.conftest import MakeClient
from tests.fakes.engines import FakeLoader

MODELS = {
    "tools": ModelProfile(model="/m/tools"),
    "plain": ModelProfile(model="/m/plain", max_n=4, max_best_of=2, max_batch_prompts=3),
}
#: Long enough that a request which waited for a switch to "plain" could not be answered within it.
LOAD_S = 3.0


async def _auto_server(make_client: MakeClient) -> tuple[Any, EngineManager[Any], FakeLoader]:
    loader = FakeLoader()
    client, manager = await make_client(models=MODELS, loader=loader, switching=Switching(mode="auto"))
    loader.delay_s = LOAD_S  # the start-up load of "tools" is done: a switch from now on takes LOAD_S
    return client, manager, loader


def _refusal(response: Any, param: str, code: str) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == code, error
    assert error["type"] == "BadRequestError" or error["type"].startswith("invalid_request"), error
    message: str = error["message"]
    return message


@pytest.mark.parametrize(
    ("path", "body", "param", "code"),
    [
        ("/v1/chat/completions", {"model": "plain", "messages": [], "n": 100000}, "n", "integer_above_max_value"),
        ("/v1/completions", {"model": "plain", "prompt": "hi", "n": 5}, "n", "integer_above_max_value"),
        ("/v1/completions", {"model": "plain", "prompt": "hi", "best_of": 3}, "best_of", "integer_above_max_value"),
        ("/v1/completions", {"model": "plain", "prompt": ["a"] * 4}, "prompt", "array_above_max_length"),
        ("/v1/completions", {"model": "plain", "prompt": [[1, 2]] * 4}, "prompt", "array_above_max_length"),
        ("/v1/embeddings", {"model": "plain", "input": ["a", "b", "c", "d"]}, "input", "array_above_max_length"),
        ("/v1/chat/completions/batch", {"model": "plain", "messages": [[]] * 4}, "messages", "array_above_max_length"),
        ("/rerank", {"model": "plain", "query": "q", "documents": ["d"] * 4}, "documents", "array_above_max_length"),
        # vLLM bounds these two itself, but only once the model is loaded: a switch first, then its 400.
        (
            "/v1/completions",
            {"model": "plain", "prompt_embeds": ["AAAA"] * 4},
            "prompt_embeds",
            "array_above_max_length",
        ),
        (
            "/v1/systemone",
            {"model": "plain", "state": "s", "questions": {f"q{i}": {"type": "yes_no"} for i in range(4)}},
            "questions",
            "array_above_max_length",
        ),
    ],
)
async def test_a_request_past_a_bound_gets_a_400_at_once_and_never_moves_the_device(
    make_client: MakeClient, path: str, body: dict[str, Any], param: str, code: str
) -> None:
    client, manager, loader = await _auto_server(make_client)
    started = time.monotonic()
    response = await client.post(path, json=body)
    assert time.monotonic() - started < LOAD_S / 3  # answered at once, not after a switch
    assert "max_" in _refusal(response, param, code)
    assert manager.active_model == "tools" and manager.switching_to is None
    assert loader.loads == ["tools"]  # "plain" was never loaded


async def test_a_request_naming_no_model_is_bounded_by_the_active_one(make_client: MakeClient) -> None:
    client, _, loader = await _auto_server(make_client)
    # "tools" has the defaults: n up to 128, as OpenAI's API.
    _refusal(await client.post("/v1/chat/completions", json={"messages": [], "n": 129}), "n", "integer_above_max_value")
    ok = await client.post("/v1/chat/completions", json={"messages": [], "n": 128, "max_tokens": 1})
    assert ok.status_code == 200, ok.text
    assert loader.loads == ["tools"]


async def test_within_the_bounds_a_request_is_served(make_client: MakeClient) -> None:
    client, manager, _ = await _auto_server(make_client)
    # A token list is one prompt, and a conversation's messages are one, however many they are.
    for path, body in (
        ("/v1/completions", {"model": "plain", "prompt": list(range(50)), "n": 4, "best_of": 2}),
        ("/v1/completions", {"model": "plain", "prompt": ["a", "b", "c"]}),
        ("/v1/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": "x"}] * 50}),
    ):
        response = await client.post(path, json=body)
        assert response.status_code == 200, (path, response.text)
    assert manager.active_model == "plain"


async def test_a_switch_to_a_model_waits_for_no_bound_of_another(make_client: MakeClient) -> None:
    """The bound is the named model's: n=100 is within "tools"' bound while "plain" (max_n 4) is active."""
    client, manager, _ = await _auto_server(make_client)
    assert (await client.post("/v1/completions", json={"model": "plain", "prompt": "x"})).status_code == 200
    assert manager.active_model == "plain"
    response = await client.post("/v1/chat/completions", json={"model": "tools", "messages": [], "n": 100})
    assert response.status_code == 200, response.text
