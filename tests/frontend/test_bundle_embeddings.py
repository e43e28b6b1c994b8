"""A bundle over a real tiny pooling engine: tiny-plain converted by vLLM into an embedding model."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import pytest

from server.frontend import FrontendBundle, FrontendSettings, JsonResult, build_bundle
from tests.frontend.tiny import EMBED_MODEL, engine_cache_salts, running_engine_ids

pytestmark = pytest.mark.engine

HIDDEN_SIZE = 128  # the tiny models' width, which is the embedding size


@pytest.fixture(scope="module")
async def embed(embed_engine: Any) -> FrontendBundle:
    return await build_bundle(EMBED_MODEL, embed_engine, FrontendSettings())


def ok(result: Any) -> dict[str, Any]:
    assert isinstance(result, JsonResult), result
    assert result.status_code == 200, result.payload
    return result.payload


async def test_a_pooling_model_supports_embeddings(embed: FrontendBundle) -> None:
    assert embed.supports_embeddings is True


async def test_embeddings_for_each_input(embed_engine: Any, embed: FrontendBundle) -> None:
    request_id = uuid.uuid4().hex
    payload = ok(await embed.call("embeddings", {"model": "alias", "input": ["hello", "weather in Paris"]}, request_id))
    assert payload["id"] == f"embd-{request_id}"
    assert payload["model"] == EMBED_MODEL
    assert [item["index"] for item in payload["data"]] == [0, 1]
    assert all(len(item["embedding"]) == HIDDEN_SIZE for item in payload["data"])
    assert payload["data"][0]["embedding"] != payload["data"][1]["embedding"]
    assert payload["usage"]["prompt_tokens"] > 0
    assert running_engine_ids(embed_engine, request_id) == ()


async def test_base64_embeddings(embed: FrontendBundle) -> None:
    payload = ok(await embed.call("embeddings", {"input": "hello", "encoding_format": "base64"}, uuid.uuid4().hex))
    assert len(base64.b64decode(payload["data"][0]["embedding"])) == 4 * HIDDEN_SIZE  # float32


async def test_chat_messages_are_embedded_through_the_template(embed: FrontendBundle) -> None:
    body = {"messages": [{"role": "user", "content": "hello"}]}
    (item,) = ok(await embed.call("embeddings", body, uuid.uuid4().hex))["data"]
    assert len(item["embedding"]) == HIDDEN_SIZE


async def test_embedding_requests_reach_the_engine_under_our_ids(embed_engine: Any, embed: FrontendBundle) -> None:
    request_id = uuid.uuid4().hex
    seen: set[str] = set()

    async def watch() -> None:
        while True:
            seen.update(running_engine_ids(embed_engine, request_id))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        ok(await embed.call("embeddings", {"input": ["a", "b"]}, request_id))
    finally:
        watcher.cancel()
    assert seen == {f"embd-{request_id}-0", f"embd-{request_id}-1"}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param({"input": 5}, 400, id="input-not-text"),
        pytest.param({"input": "hi", "encoding_format": "bytes"}, 400, id="binary-format"),
        pytest.param(["hi"], 400, id="not-an-object"),
    ],
)
async def test_bad_embedding_bodies(embed: FrontendBundle, body: Any, status: int) -> None:
    result = await embed.call("embeddings", body, uuid.uuid4().hex)
    assert isinstance(result, JsonResult)
    assert (result.status_code, result.payload["error"]["code"]) == (status, status)


async def test_a_pooling_model_has_no_chat_or_completions(embed: FrontendBundle) -> None:
    for operation in ("chat.completions", "completions"):
        result = await embed.call(operation, {"messages": [], "prompt": "x"}, uuid.uuid4().hex)
        assert isinstance(result, JsonResult)
        assert result.status_code == 404  # as `vllm serve`, which has no such route for a pooling model
        assert result.payload["error"]["type"] == "NotFoundError"
        assert "does not support the" in result.payload["error"]["message"]


async def test_a_pooling_model_still_tokenizes(embed: FrontendBundle) -> None:
    payload = ok(await embed.call("tokenize", {"prompt": "hello"}, uuid.uuid4().hex))
    assert payload["count"] == len(payload["tokens"]) > 0


async def test_vllms_other_pooling_routes_on_an_embedding_model(embed: FrontendBundle) -> None:
    # An embedding model has vLLM's pooling, score and rerank routes (cosine similarity), and Cohere's embed.
    assert [embed.supports(op) for op in ("pooling", "score", "rerank", "embed.cohere", "classify")] == [
        True,
        True,
        True,
        True,
        False,
    ]
    pooled = ok(await embed.call("pooling", {"input": "hello"}, uuid.uuid4().hex))
    assert len(pooled["data"][0]["data"]) == HIDDEN_SIZE
    scored = ok(await embed.call("score", {"text_1": "hello", "text_2": ["hello", "weather"]}, uuid.uuid4().hex))
    same, other = (item["score"] for item in scored["data"])
    assert same == pytest.approx(1.0, abs=1e-3) and other < same  # cosine similarity of the embeddings
    body = {"query": "hello", "documents": ["weather", "hello"]}
    ranked = ok(await embed.call("rerank", body, uuid.uuid4().hex))
    assert [result["index"] for result in ranked["results"]] == [1, 0]  # the identical document first
    cohere = ok(await embed.call("embed.cohere", {"texts": ["hello"]}, uuid.uuid4().hex))
    assert len(cohere["embeddings"]["float"][0]) == HIDDEN_SIZE


async def test_cohere_embed_carries_its_cache_salt_to_the_engine(
    embed_engine: Any, embed: FrontendBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's Cohere request declares no ``cache_salt``: the frontend's does, so the key's salt the API layer adds
    reaches the prefix cache, for plain texts and for inputs rendered through the chat template alike."""
    salts = engine_cache_salts(embed_engine, monkeypatch)
    ok(await embed.call("embed.cohere", {"texts": ["a", "b"], "cache_salt": "group-salt"}, uuid.uuid4().hex))
    inputs = {"inputs": [{"content": [{"type": "text", "text": "a"}]}], "cache_salt": "group-salt"}
    ok(await embed.call("embed.cohere", inputs, uuid.uuid4().hex))
    ok(await embed.call("embed.cohere", {"texts": ["c"]}, uuid.uuid4().hex))
    assert salts == ["group-salt", "group-salt", "group-salt", None]
    refused = await embed.call("embed.cohere", {"texts": ["a"], "cache_salt": ""}, uuid.uuid4().hex)
    assert refused.status_code == 400 and "cache_salt" in str(refused.payload)  # type: ignore[union-attr]


async def test_a_generate_route_on_a_pooling_model_is_a_404_naming_it(embed: FrontendBundle) -> None:
    result = await embed.call("responses.create", {"input": "hi"}, uuid.uuid4().hex)
    assert isinstance(result, JsonResult) and result.status_code == 404
    assert EMBED_MODEL in result.payload["error"]["message"] and "Responses" in result.payload["error"]["message"]
