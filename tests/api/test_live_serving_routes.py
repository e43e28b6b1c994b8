"""End to end: vLLM's Responses and Anthropic Messages routes through ``turnout serve profiles/demo.yaml``.

The official ``openai`` client's ``responses`` API and the official ``anthropic`` SDK against a real server with
two tiny engines (tiny-tools: ChatML template, hermes tool calls; tiny-plain: a bracket template, no tools), so
each model's own frontend is seen to apply after a switch. The demo profile's keep strategy keeps both engines
resident: after the first visit a switch is a pointer swap, and a stored response survives it.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.api.live_server import DEMO_ADMIN_TOKEN, DEMO_API_KEY, LiveServer, start_demo
from tests.live_servers import LiveServers

pytestmark = [pytest.mark.engine, pytest.mark.live_server("demo")]

TOKEN, KEY = DEMO_ADMIN_TOKEN, DEMO_API_KEY
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEATHER = "What is the weather in Paris?"
#: The Anthropic SDK has no temperature argument any more; vLLM's Messages request still takes one.
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path], live_servers: LiveServers) -> LiveServer:
    """The demo profile with an API key, and vLLM's Responses store on; shared with test_live_server."""
    return live_servers.get("demo", start_demo)


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=120) as openai_client:
        yield openai_client


@pytest.fixture(scope="module")
def claude(server: LiveServer) -> Iterator[anthropic.Anthropic]:
    # The SDK sends the key as x-api-key, which vLLM itself would refuse.
    with anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=120) as anthropic_client:
        yield anthropic_client


def _activate(server: LiveServer, model: str, drain_timeout: float = 5) -> None:
    response = httpx.post(
        f"{server.url}/v1/models/switch",
        json={"model": model, "drain_timeout": drain_timeout},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=300,
    )
    assert response.status_code == 200, response.text


def test_responses_create_stream_and_retrieve_on_each_model(server: LiveServer, client: openai.OpenAI) -> None:
    _activate(server, "tools")
    created = client.responses.create(model="tools", input="Hello!", max_output_tokens=16, temperature=0)
    assert created.model == "tools" and created.output_text == "Hello from tiny-tools."
    assert client.responses.retrieve(created.id).output_text == created.output_text
    with client.responses.stream(model="tools", input="Hello!", max_output_tokens=16, temperature=0) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Hello from tiny-tools."

    _activate(server, "plain")
    plain = client.responses.create(model="plain", input="Hello!", max_output_tokens=16, temperature=0)
    assert plain.model == "plain" and plain.output_text == "Hello from tiny-plain."  # plain's own template
    assert client.responses.retrieve(plain.id).output_text == plain.output_text
    with pytest.raises(openai.NotFoundError, match="created by model 'tools'"):
        client.responses.retrieve(created.id)
    _activate(server, "tools")  # the keep strategy kept tools' engine, and its stored response with it
    assert client.responses.retrieve(created.id).output_text == "Hello from tiny-tools."


def test_a_tool_call_through_the_models_parser_in_the_responses_api(server: LiveServer, client: openai.OpenAI) -> None:
    _activate(server, "tools")
    response = client.responses.create(
        model="tools",
        input=WEATHER,
        tools=[WEATHER_TOOL],
        max_output_tokens=64,
        temperature=0,  # type: ignore[list-item]
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(call.name, call.arguments) for call in calls] == [("get_weather", '{"city": "Paris"}')]


def test_anthropic_messages_plain_stream_tool_call_and_count_tokens(
    server: LiveServer, claude: anthropic.Anthropic
) -> None:
    _activate(server, "tools")
    hello = [{"role": "user", "content": "Hello!"}]
    message = claude.messages.create(model="tools", max_tokens=16, messages=hello, extra_body=GREEDY)  # type: ignore[arg-type]
    assert message.model == "tools" and message.content[0].text == "Hello from tiny-tools."  # type: ignore[union-attr]
    with claude.messages.stream(model="tools", max_tokens=16, messages=hello, extra_body=GREEDY) as stream:  # type: ignore[arg-type]
        events = [event.type for event in stream]
        assert stream.get_final_text() == "Hello from tiny-tools."
    assert events[0] == "message_start" and events[-1] == "message_stop"
    tool = {"name": "get_weather", "description": "Current weather", "input_schema": WEATHER_TOOL["parameters"]}
    weather = [{"role": "user", "content": WEATHER}]
    called = claude.messages.create(model="tools", max_tokens=64, messages=weather, tools=[tool], extra_body=GREEDY)  # type: ignore[arg-type, list-item]
    uses = [block for block in called.content if block.type == "tool_use"]
    assert called.stop_reason == "tool_use" and [(use.name, use.input) for use in uses] == [  # type: ignore[union-attr]
        ("get_weather", {"city": "Paris"})
    ]
    counted = claude.messages.count_tokens(model="tools", messages=hello)  # type: ignore[arg-type]
    tokenized = httpx.post(
        f"{server.url}/tokenize", json={"model": "tools", "messages": hello}, headers={"x-api-key": KEY}
    ).json()
    assert counted.input_tokens == tokenized["count"] > 0


def test_messages_errors_reach_the_sdk_as_anthropic_errors(server: LiveServer, claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError, match="nope"):
        claude.messages.create(model="nope", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    with (
        anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0) as keyless,
        pytest.raises(anthropic.AuthenticationError),
    ):
        keyless.messages.create(model="tools", max_tokens=4, messages=[{"role": "user", "content": "hi"}])


def test_a_switch_while_responses_and_messages_streams_run(
    server: LiveServer, client: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    _activate(server, "tools")
    outcomes: dict[str, Any] = {}
    started = threading.Barrier(3, timeout=120)
    # Each client stops reading once its stream runs, until the switch has answered: the stream then waits on the
    # client, not the other way round, whatever the machine's speed. Each may still end completed (what fits in
    # the sockets' buffers was sent before the drain) or with its API's error event (the fake-engine tests pin
    # the error events' shapes); what must never happen is a hang or an answer from the other model.
    switched = threading.Event()

    def responses_stream() -> None:
        # ignore_eos keeps it generating until the switch drains it out.
        stream = client.responses.create(
            model="tools", input="Hello!", max_output_tokens=900, stream=True, extra_body={"ignore_eos": True}
        )
        events = []
        for event in stream:
            if len(events) == 2:
                started.wait()
                switched.wait(120)
            events.append(event)
        outcomes["responses"] = events

    def messages_stream() -> None:
        try:
            # Greedy: a completed answer is then the model's one answer (sampled, one in many read "tiny--tools").
            with claude.messages.stream(
                model="tools", max_tokens=900, messages=[{"role": "user", "content": "Hello!"}], extra_body=GREEDY
            ) as stream:
                started.wait()
                switched.wait(120)
                outcomes["messages"] = ("completed", stream.get_final_message())
        except anthropic.APIStatusError as error:  # the SDK raises a stream's error event
            outcomes["messages"] = ("error", error)

    threads = [threading.Thread(target=responses_stream), threading.Thread(target=messages_stream)]
    for thread in threads:
        thread.start()
    try:
        started.wait()
        _activate(server, "plain", drain_timeout=0.2)
    finally:
        switched.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a stream hung"

    last = outcomes["responses"][-1]
    if last.type == "error":
        assert last.code == "model_switched"
    else:
        assert last.type == "response.completed" and last.response.status in ("completed", "incomplete")
    models = {event.response.model for event in outcomes["responses"] if hasattr(event, "response")}
    assert models == {"tools"}
    kind, result = outcomes["messages"]
    if kind == "completed":  # it may finish before the drain timeout: then tools answered it whole
        assert result.model == "tools" and result.content[0].text == "Hello from tiny-tools."
    else:
        assert result.body["error"]["type"] == "overloaded_error" and "switched from 'tools'" in str(result.body)


def _pipelined(url: str, requests: list[tuple[str, dict[str, Any], dict[str, str]]]) -> list[tuple[int, Any]]:
    """POST ``requests`` (path, JSON body, headers) on one HTTP/1.1 connection in one write; their answers in order.

    The server reads the next request as soon as it has answered the one before (uvicorn pipelines them), with no
    round trip through the client in between.
    """
    host, port = url.removeprefix("http://").split(":")
    wire = b""
    for path, body, headers in requests:
        payload = json.dumps(body).encode()
        head = {"Host": host, "Content-Type": "application/json", "Content-Length": str(len(payload)), **headers}
        wire += f"POST {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode()
        wire += b"\r\n" + payload
    answers = []
    # One buffer for every answer: a read-ahead must not lose the next one.
    with socket.create_connection((host, int(port)), timeout=300) as sock, sock.makefile("rb") as reader:
        sock.sendall(wire)

        class _Shared:
            """The shared buffer, which an answer read to its end must not close."""

            def __getattr__(self, name: str) -> Any:
                return getattr(reader, name)

            def close(self) -> None:
                pass

        class _Sock:
            def makefile(self, *_: Any) -> Any:
                return _Shared()

        for _ in requests:
            answer = http.client.HTTPResponse(_Sock())  # type: ignore[arg-type]
            answer.begin()
            answers.append((answer.status, json.loads(answer.read())))
    return answers


def test_a_switch_ends_a_background_response_as_failed_and_retrieve_says_why(
    server: LiveServer, client: openai.OpenAI
) -> None:
    _activate(server, "tools")
    # The switch goes in the same write as the create, so the server reads it the moment it has answered the
    # create, while the response generates. Sent by the test after the create's answer, it could come too late:
    # on a busy 2-core machine the engine's processes keep the cores while the tiny model generates (about 4 s
    # for these 900 tokens), and the client's next request reached the server 1.5-3.6 s after the create's
    # answer, or only once the response had finished, while the server answered each request in milliseconds
    # (measured with curl; vLLM's own server shows the same client-side delays).
    # ignore_eos keeps it generating until the switch drains it out.
    create = {"model": "tools", "input": "Hello!", "max_output_tokens": 900, "background": True, "store": True}
    switch = {"model": "plain", "drain_timeout": 0.2}
    (create_status, created), (switch_status, switched) = _pipelined(
        server.url,
        [
            ("/v1/responses", {**create, "ignore_eos": True}, {"Authorization": f"Bearer {KEY}"}),
            ("/v1/models/switch", switch, {"Authorization": f"Bearer {TOKEN}"}),
        ],
    )
    assert create_status == 200 and created["status"] in ("queued", "in_progress"), created
    assert switch_status == 200, switched
    _activate(server, "tools")  # the keep strategy kept tools' engine and its store
    retrieved = client.responses.retrieve(created["id"])
    assert retrieved.status == "failed", retrieved
    assert retrieved.error is not None and retrieved.error.code == "model_switched"
    assert "tools" in retrieved.error.message
