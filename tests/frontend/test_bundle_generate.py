"""A bundle over a real tiny generating engine (tiny-tools): answers, streams, errors, templates, aborts."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.frontend import (
    WITHHELD,
    FrontendBundle,
    FrontendConfigError,
    FrontendSettings,
    JsonResult,
    StreamResult,
    build_bundle,
)
from server.tinymodels.spec import TEMPLATES_DIR, TINY_TOOLS, WEATHER_TOOL
from tests.frontend.tiny import MAX_MODEL_LEN, TOOLS_MODEL, running_engine_ids

pytestmark = pytest.mark.engine

HELLO = [{"role": "user", "content": "Hello!"}]
WEATHER = [{"role": "user", "content": "What's the weather in Paris?"}]
# Long enough that only an abort can end it early.
ENDLESS = {"max_tokens": 400, "ignore_eos": True}


@pytest.fixture(scope="module")
async def plain(tools_engine: Any) -> FrontendBundle:
    """The tokenizer's own (ChatML) template, no tool parsing."""
    return await build_bundle(TOOLS_MODEL, tools_engine, FrontendSettings())


ALT_TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


@pytest.fixture(scope="module")
async def alt(tools_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> FrontendBundle:
    """The same engine behind another chat template, from a file."""
    template = tmp_path_factory.mktemp("templates") / "alt.jinja"
    template.write_text(ALT_TEMPLATE, encoding="utf-8")
    return await build_bundle(TOOLS_MODEL, tools_engine, FrontendSettings(chat_template=str(template)))


@pytest.fixture(scope="module")
async def tools(tools_engine: Any) -> FrontendBundle:
    """Auto tool choice with vLLM's hermes parser."""
    settings = FrontendSettings(enable_auto_tool_choice=True, tool_call_parser="hermes")
    return await build_bundle(TOOLS_MODEL, tools_engine, settings)


def new_id() -> str:
    return uuid.uuid4().hex


def ok(result: Any) -> dict[str, Any]:
    assert isinstance(result, JsonResult), result
    assert result.status_code == 200, result.payload
    return result.payload


async def read_stream(result: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """All SSE chunks, and the JSON events among them."""
    assert isinstance(result, StreamResult), result
    chunks = [chunk async for chunk in result.chunks]
    return chunks, [json.loads(chunk.removeprefix("data: ")) for chunk in chunks[:-1]]


def streamed_text(events: list[dict[str, Any]]) -> str:
    return "".join(event["choices"][0]["delta"].get("content") or "" for event in events if event["choices"])


async def rendered(bundle: FrontendBundle, messages: Any) -> str:
    """The prompt ``bundle`` renders for ``messages``, as a client sees it: /tokenize, then /detokenize."""
    body = {"messages": messages, "add_generation_prompt": True}
    tokens = ok(await bundle.call("tokenize", body, new_id()))["tokens"]
    text: str = ok(await bundle.call("detokenize", {"tokens": tokens}, new_id()))["prompt"]
    return text


async def wait_for_engine_ids(engine: Any, request_id: str, count: int) -> tuple[str, ...]:
    for _ in range(500):
        if len(ids := running_engine_ids(engine, request_id)) == count:
            return ids
        await asyncio.sleep(0.01)
    raise AssertionError(f"{request_id} never had {count} engine requests: {running_engine_ids(engine, request_id)}")


async def test_bundle_describes_its_model(plain: FrontendBundle) -> None:
    assert plain.model_name == TOOLS_MODEL
    assert plain.max_model_len == MAX_MODEL_LEN
    assert plain.supports_embeddings is False
    assert plain.settings == FrontendSettings()


async def test_chat_answers_with_the_models_text(tools_engine: Any, plain: FrontendBundle) -> None:
    request_id = new_id()
    body = {"model": "an-alias", "messages": HELLO, "max_tokens": 32, "temperature": 0}
    payload = ok(await plain.call("chat.completions", body, request_id))
    assert payload["id"] == f"chatcmpl-{request_id}"
    assert payload["object"] == "chat.completion"
    assert payload["model"] == TOOLS_MODEL  # the served name, whatever the body said
    (choice,) = payload["choices"]
    assert choice["message"] == {**choice["message"], "role": "assistant", "content": TINY_TOOLS.plain_answer}
    assert choice["finish_reason"] == "stop"
    assert payload["usage"]["completion_tokens"] > 0
    assert running_engine_ids(tools_engine, request_id) == ()


async def test_chat_streams_sse_chunks_ending_with_done(tools_engine: Any, plain: FrontendBundle) -> None:
    request_id = new_id()
    body = {"messages": HELLO, "max_tokens": 32, "temperature": 0, "stream": True}
    chunks, events = await read_stream(await plain.call("chat.completions", body, request_id))
    assert all(chunk.startswith("data: ") and chunk.endswith("\n\n") for chunk in chunks)
    assert chunks[-1] == "data: [DONE]\n\n"
    assert {event["id"] for event in events} == {f"chatcmpl-{request_id}"}
    assert {event["object"] for event in events} == {"chat.completion.chunk"}
    assert streamed_text(events) == TINY_TOOLS.plain_answer
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert tools_engine.output_processor.get_num_unfinished_requests() == 0


async def test_completion_answers_each_prompt(plain: FrontendBundle) -> None:
    request_id = new_id()
    payload = ok(await plain.call("completions", {"prompt": ["Hello", "Paris"], "max_tokens": 4}, request_id))
    assert payload["id"] == f"cmpl-{request_id}"
    assert payload["object"] == "text_completion"
    assert [choice["index"] for choice in payload["choices"]] == [0, 1]
    assert all(isinstance(choice["text"], str) for choice in payload["choices"])
    assert payload["usage"]["completion_tokens"] <= 8


async def test_completion_streams(plain: FrontendBundle) -> None:
    chunks, events = await read_stream(
        await plain.call("completions", {"prompt": "Hello", "max_tokens": 3, "stream": True}, new_id())
    )
    assert chunks[-1] == "data: [DONE]\n\n"
    assert events[-1]["choices"][0]["finish_reason"] == "length"


async def test_tokenize_and_detokenize_round_trip(plain: FrontendBundle) -> None:
    payload = ok(await plain.call("tokenize", {"prompt": "weather in Paris"}, new_id()))
    assert payload["count"] == len(payload["tokens"]) > 0
    assert payload["max_model_len"] == MAX_MODEL_LEN
    assert ok(await plain.call("detokenize", {"tokens": payload["tokens"]}, new_id())) == {"prompt": "weather in Paris"}


async def test_tokenizer_info_shows_the_bundles_own_chat_template(plain: FrontendBundle, alt: FrontendBundle) -> None:
    infos = [ok(await bundle.call("tokenizer_info", {}, new_id())) for bundle in (plain, alt)]
    assert all(info["tokenizer_class"] for info in infos)
    # The profile's template is the one vLLM reports; without one, whatever the tokenizer's config holds.
    assert infos[1]["chat_template"] == ALT_TEMPLATE != infos[0].get("chat_template")


async def test_tokenize_renders_chat_messages_with_the_template(plain: FrontendBundle) -> None:
    body = {"messages": HELLO, "add_generation_prompt": True, "return_token_strs": True}
    payload = ok(await plain.call("tokenize", body, new_id()))
    assert payload["token_strs"][0] == "<|im_start|>"
    assert payload["count"] == len(payload["tokens"])


async def test_two_templates_render_and_prompt_differently(plain: FrontendBundle, alt: FrontendBundle) -> None:
    assert await rendered(plain, HELLO) == "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
    assert await rendered(alt, HELLO) == "[user] Hello!\n[assistant] "
    # Generation uses the same template: each bundle's prompt is exactly what its /tokenize counts.
    for bundle in (plain, alt):
        count = ok(await bundle.call("tokenize", {"messages": HELLO}, new_id()))["count"]
        payload = ok(await bundle.call("chat.completions", {"messages": HELLO, "max_tokens": 1}, new_id()))
        assert payload["usage"]["prompt_tokens"] == count


async def test_a_template_that_fails_to_render_is_a_400(tools_engine: Any) -> None:
    # tiny-plain's template needs a bos_token, which tiny-tools' tokenizer does not define.
    settings = FrontendSettings(chat_template=str(TEMPLATES_DIR / "tiny-bracket.jinja"))
    bundle = await build_bundle(TOOLS_MODEL, tools_engine, settings)
    result = await bundle.call("chat.completions", {"messages": HELLO}, new_id())
    assert isinstance(result, JsonResult)
    assert result.status_code == 400
    assert "'bos_token' is undefined" in result.payload["error"]["message"]


async def test_tokenize_rejects_messages_chat_rejects(plain: FrontendBundle) -> None:
    result = await plain.call("tokenize", {"messages": "not a list"}, new_id())
    assert isinstance(result, JsonResult) and result.status_code == 400


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param([{"role": "user", "content": "hi"}], None, id="not-an-object"),
        pytest.param("hello", None, id="a-string"),
        pytest.param({}, "messages", id="no-messages"),
        pytest.param({"messages": "hi"}, "messages", id="messages-not-a-list"),
        pytest.param({"messages": HELLO, "temperature": "hot"}, "temperature", id="temperature-not-a-number"),
        pytest.param({"messages": HELLO, "max_tokens": 0}, "max_tokens", id="max-tokens-zero"),
        pytest.param({"messages": HELLO, "max_tokens": 10 * MAX_MODEL_LEN}, "max_tokens", id="past-context"),
        pytest.param({"messages": HELLO, "stream_options": {"include_usage": True}}, "stream_options", id="no-stream"),
        # vLLM's own validator crashes on this (AttributeError: 'str' has no 'get'); found by schemathesis.
        pytest.param({"messages": HELLO, "structured_outputs": ""}, None, id="validator-crash"),
    ],
)
async def test_bad_chat_bodies_get_openai_400s(plain: FrontendBundle, body: Any, param: str | None) -> None:
    result = await plain.call("chat.completions", body, new_id())
    assert isinstance(result, JsonResult)
    assert result.status_code == 400, result.payload
    error = result.payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("BadRequestError", 400)
    assert error["param"] == param
    assert error["message"] and "Traceback" not in error["message"]


@pytest.mark.parametrize(
    "body", [{"prompt": {"text": "hi"}}, {"prompt": "hi", "max_tokens": "many"}, {"prompt": "hi", "n": 0}]
)
async def test_bad_completion_bodies_get_400s(plain: FrontendBundle, body: dict[str, Any]) -> None:
    result = await plain.call("completions", body, new_id())
    assert isinstance(result, JsonResult)
    assert (result.status_code, result.payload["error"]["code"]) == (400, 400)


async def test_auto_tool_choice_without_a_parser_is_vllms_400(plain: FrontendBundle) -> None:
    body = {"messages": WEATHER, "tools": [WEATHER_TOOL], "tool_choice": "auto"}
    result = await plain.call("chat.completions", body, new_id())
    assert isinstance(result, JsonResult)
    assert result.status_code == 400
    assert result.payload["error"]["message"] == (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )


async def test_hermes_parses_the_models_tool_call(tools: FrontendBundle) -> None:
    body = {
        "messages": WEATHER,
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": 64,
    }
    (choice,) = ok(await tools.call("chat.completions", body, new_id()))["choices"]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


async def test_a_model_without_embeddings_says_so(plain: FrontendBundle) -> None:
    result = await plain.call("embeddings", {"input": "hello"}, new_id())
    assert isinstance(result, JsonResult)
    assert result.status_code == 404
    assert result.payload["error"]["message"] == f"The model '{TOOLS_MODEL}' does not support the Embeddings API."


async def test_aborting_a_stream_ends_it_with_finish_reason_abort(tools_engine: Any, plain: FrontendBundle) -> None:
    request_id = new_id()
    result = await plain.call("chat.completions", {"messages": HELLO, "stream": True, **ENDLESS}, request_id)
    assert isinstance(result, StreamResult)
    chunks: list[str] = []
    async for chunk in result.chunks:
        chunks.append(chunk)
        if len(chunks) == 3:
            engine_ids = running_engine_ids(tools_engine, request_id)
            assert engine_ids == (f"chatcmpl-{request_id}",)
            await tools_engine.abort(list(engine_ids))
    assert len(chunks) < 20  # 400 tokens would be 400 chunks
    assert chunks[-1] == "data: [DONE]\n\n"
    last = json.loads(chunks[-2].removeprefix("data: "))
    assert last["choices"][0]["finish_reason"] == "abort"
    assert running_engine_ids(tools_engine, request_id) == ()


async def test_aborting_a_completion_returns_the_partial_answers(tools_engine: Any, plain: FrontendBundle) -> None:
    request_id = new_id()
    running = asyncio.create_task(plain.call("completions", {"prompt": ["Hello", "Paris"], **ENDLESS}, request_id))
    engine_ids = await wait_for_engine_ids(tools_engine, request_id, 2)
    assert set(engine_ids) == {f"cmpl-{request_id}-0", f"cmpl-{request_id}-1"}
    await tools_engine.abort(list(engine_ids))
    payload = ok(await asyncio.wait_for(running, 60))
    assert [choice["finish_reason"] for choice in payload["choices"]] == ["abort", "abort"]
    assert payload["usage"]["completion_tokens"] < 2 * ENDLESS["max_tokens"]
    assert tools_engine.output_processor.get_num_unfinished_requests() == 0


async def test_vllm_ignores_an_abort_that_comes_before_the_streams_first_read(
    tools_engine: Any, plain: FrontendBundle
) -> None:
    # Pins the vLLM behaviour bundle.abort() exists for: the engine gets a stream's request on the first read.
    request_id = new_id()
    result = await plain.call(
        "chat.completions", {"messages": HELLO, "stream": True, "max_tokens": 24, "ignore_eos": True}, request_id
    )
    await tools_engine.abort([f"chatcmpl-{request_id}"])  # the id vLLM derives, before the engine has it
    _, events = await read_stream(result)
    assert events[-1]["choices"][0]["finish_reason"] == "length"


async def test_bundle_abort_before_the_first_read_still_aborts(plain: FrontendBundle) -> None:
    request_id = new_id()
    result = await plain.call("chat.completions", {"messages": HELLO, "stream": True, **ENDLESS}, request_id)
    assert await plain.abort(request_id) == (f"chatcmpl-{request_id}",)
    chunks, events = await read_stream(result)
    assert len(chunks) < 20
    assert events[-1]["choices"][0]["finish_reason"] == "abort"


async def test_cancelling_a_non_streaming_call_aborts_and_raises(tools_engine: Any, plain: FrontendBundle) -> None:
    request_id = new_id()
    running = asyncio.create_task(plain.call("chat.completions", {"messages": HELLO, **ENDLESS}, request_id))
    await wait_for_engine_ids(tools_engine, request_id, 1)
    running.cancel()
    # vLLM itself would answer 400 "Client disconnected"; the bundle keeps the cancellation a cancellation.
    with pytest.raises(asyncio.CancelledError):
        await running
    assert running_engine_ids(tools_engine, request_id) == ()
    assert tools_engine.output_processor.get_num_unfinished_requests() == 0


async def test_closing_a_stream_early_aborts_its_engine_request(tools_engine: Any, plain: FrontendBundle) -> None:
    request_id = new_id()
    result = await plain.call("chat.completions", {"messages": HELLO, "stream": True, **ENDLESS}, request_id)
    assert isinstance(result, StreamResult)
    stream: AsyncIterator[str] = result.chunks
    await anext(stream)
    await anext(stream)
    await result.aclose()
    assert running_engine_ids(tools_engine, request_id) == ()
    # Aborted at once, not whenever the garbage collector closes vLLM's generator.
    assert tools_engine.output_processor.get_num_unfinished_requests() == 0


async def test_a_stream_dropped_unread_frees_its_request_id(plain: FrontendBundle) -> None:
    request_id = new_id()
    result = await plain.call("chat.completions", {"messages": HELLO, "stream": True, "max_tokens": 2}, request_id)
    assert isinstance(result, StreamResult)
    await result.aclose()
    # The id is free again: reusing it is no "already in flight" error.
    assert (
        ok(await plain.call("chat.completions", {"messages": HELLO, "max_tokens": 2}, request_id))["id"]
        == f"chatcmpl-{request_id}"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param(
            FrontendSettings(enable_auto_tool_choice=True, tool_call_parser="nope"),
            "unknown tool_call_parser 'nope'",
            id="unknown-tool-parser",
        ),
        pytest.param(
            FrontendSettings(reasoning_parser="nope"),
            "unknown reasoning_parser 'nope'",
            id="unknown-reasoning",
        ),
        # deepseek_r1 needs <think> tokens, which tiny-tools' tokenizer lacks; vLLM checks at build time.
        pytest.param(
            FrontendSettings(reasoning_parser="deepseek_r1"),
            "cannot be used with the tokenizer",
            id="no-think",
        ),
        pytest.param(FrontendSettings(chat_template="/no/such/template.jinja"), "cannot be read", id="no-template"),
    ],
)
async def test_bad_settings_fail_the_build(tools_engine: Any, settings: FrontendSettings, message: str) -> None:
    with pytest.raises(FrontendConfigError, match=message):
        await build_bundle(TOOLS_MODEL, tools_engine, settings)


async def test_a_template_edited_between_builds_is_reread(tools_engine: Any, tmp_path: Path) -> None:
    template = tmp_path / "edited.jinja"
    template.write_text("first:{{ messages[0]['content'] }}", encoding="utf-8")
    settings = FrontendSettings(chat_template=str(template))
    assert await rendered(await build_bundle(TOOLS_MODEL, tools_engine, settings), HELLO) == "first:Hello!"
    template.write_text("second:{{ messages[0]['content'] }}", encoding="utf-8")
    assert await rendered(await build_bundle(TOOLS_MODEL, tools_engine, settings), HELLO) == "second:Hello!"


async def test_chat_batch_answers_each_conversation(plain: FrontendBundle) -> None:
    body = {"messages": [HELLO, [{"role": "user", "content": "Hi"}]], "max_tokens": 8, "temperature": 0}
    payload = ok(await plain.call("chat.batch", body, new_id()))
    assert [choice["index"] for choice in payload["choices"]] == [0, 1]
    assert all(choice["message"]["content"] for choice in payload["choices"])


async def test_messages_and_responses_use_the_bundles_own_template(plain: FrontendBundle, alt: FrontendBundle) -> None:
    # The same engine behind two templates: Anthropic's count_tokens renders with each bundle's own.
    body = {"messages": [{"role": "user", "content": "Hello!"}]}
    counts = [ok(await bundle.call("messages.count_tokens", body, new_id()))["input_tokens"] for bundle in (plain, alt)]
    tokenized = [ok(await bundle.call("tokenize", body, new_id()))["count"] for bundle in (plain, alt)]
    assert counts == tokenized and counts[0] != counts[1]


async def test_a_route_a_generate_model_lacks_is_a_404_naming_it(plain: FrontendBundle) -> None:
    for operation in ("pooling", "classify", "score", "rerank", "embed.cohere"):
        result = await plain.call(operation, {"input": "x"}, new_id())
        assert isinstance(result, JsonResult) and result.status_code == 404, operation
        assert TOOLS_MODEL in result.payload["error"]["message"]


async def test_generative_scoring_reads_label_token_probabilities(plain: FrontendBundle) -> None:
    token_ids = ok(await plain.call("tokenize", {"prompt": " yes no"}, new_id()))["tokens"][-2:]
    body = {"query": "Is Paris in France?", "items": [" Yes", " No"], "label_token_ids": token_ids}
    payload = ok(await asyncio.wait_for(plain.call("generative_scoring", body, new_id()), 60))
    assert len(payload["data"]) == 2 and all(0.0 <= item["score"] <= 1.0 for item in payload["data"])


async def test_a_withheld_response_is_answered_as_an_unknown_id(
    tools_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API layer asks for another key's stored response ``withheld``: vLLM's own "not found", whatever its
    store holds, so the id reads exactly as one never made (for retrieve and cancel alike)."""
    monkeypatch.setenv("VLLM_ENABLE_RESPONSES_API_STORE", "1")  # as turnout serve sets it
    bundle = await build_bundle(TOOLS_MODEL, tools_engine, FrontendSettings())
    response_id = new_id()
    ok(await bundle.call("responses.create", {"input": "Hello!", "max_output_tokens": 2}, response_id))
    stored = await bundle.call("responses.retrieve", {"response_id": response_id}, new_id())
    assert isinstance(stored, JsonResult) and stored.status_code == 200, stored
    unknown_id = new_id()
    for operation in ("responses.retrieve", "responses.cancel"):
        withheld = await bundle.call(operation, {"response_id": response_id, WITHHELD: True}, new_id())
        unknown = await bundle.call(operation, {"response_id": unknown_id}, new_id())
        assert isinstance(withheld, JsonResult) and isinstance(unknown, JsonResult)
        assert withheld.status_code == unknown.status_code == 404, withheld
        assert json.dumps(withheld.payload).replace(response_id, unknown_id) == json.dumps(unknown.payload)
    # Continuing it: the body is checked first (a bad one gets the same 400 either way), then vLLM's 404.
    for extra, status in (({}, 404), ({"temperature": "hot"}, 400)):
        body = {"input": "and then?", "max_output_tokens": 2, **extra}
        withheld = await bundle.call(
            "responses.create", {**body, "previous_response_id": response_id, WITHHELD: True}, new_id()
        )
        unknown = await bundle.call("responses.create", {**body, "previous_response_id": unknown_id}, new_id())
        assert isinstance(withheld, JsonResult) and isinstance(unknown, JsonResult)
        assert withheld.status_code == unknown.status_code == status, withheld
        assert json.dumps(withheld.payload).replace(response_id, unknown_id) == json.dumps(unknown.payload)
