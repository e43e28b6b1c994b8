"""Turnout answers byte for byte as vLLM's own server does, on the same tiny model with the same arguments.

Each case is sent to ``python -m vllm.entrypoints.openai.api_server`` and to ``turnout serve``, as JSON and as a
stream, and the two bodies must be equal bytes, SSE framing included, after normalizing only what is random per
request (:func:`normalized`): the ids (the response's, every stream chunk's, and each tool call's) and the
``created`` second. Status and media type must match too.

A stream's framing is not fixed by the request alone: when the engine gets ahead of the server's reader, vLLM's
``AsyncLLM`` merges the tokens waiting for it into one chunk (and the tool parser then sees one larger delta),
which happens now and then on a loaded machine, to either server. So each stream is asked for
:data:`STREAM_TRIES` times on each server, and Turnout's and vLLM's must share one body: a byte that Turnout
changes is in each of its bodies, so the test still fails on it.

Both servers run the demo's ``tools`` model (hermes tool calls) with a reasoning parser (``granite``: it reads
a marker in the text, so it needs no special tokens the tiny tokenizer lacks, and passes text without the marker
through as content), prefix caching off and ``OMP_NUM_THREADS=1``: a prefix-cache hit (Turnout salts its cache
per key group) or another thread count can change the last bit of a logprob. The two servers run one after
the other, never side by side, each in a module fixture that sends every case and stops its server.

``scripts/compat.sh`` runs this module on the compatibility vLLM too, so it holds on every supported vLLM.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from benchmarks.servers import ServedModel, served_model, start_turnout, start_vllm
from server.tinymodels.spec import WEATHER_TOOL
from tests.vllm_reference import asked

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
MODEL: Final = "tools"
#: Both servers' environment beside the test run's: one OpenMP thread, so both engines sum logprobs alike.
SERVER_ENV: Final = {"OMP_NUM_THREADS": "1"}

_PROFILE = """\
default_model: tools
models:
  tools:
    model: {model}
    chat_template: {template}
    enable_auto_tool_choice: true
    tool_call_parser: hermes
    reasoning_parser: granite
    dtype: float32
    max_model_len: 1024
    max_num_seqs: 8
    kv_cache_memory_bytes: 16777216
    enforce_eager: true
    enable_prefix_caching: false
"""

_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
_HELLO = [{"role": "user", "content": "Hello!"}]


@dataclass(frozen=True)
class Case:
    """One request, sent as JSON and as a stream (``stream`` is added)."""

    path: str
    body: dict[str, Any]


CASES: Final[dict[str, Case]] = {
    "chat-tools-logprobs": Case(
        "/v1/chat/completions",
        {"messages": _WEATHER, "tools": [WEATHER_TOOL], "logprobs": True, "top_logprobs": 2, "max_tokens": 30},
    ),
    "chat-tool-choice-none": Case(
        "/v1/chat/completions",
        {"messages": _WEATHER, "tools": [WEATHER_TOOL], "tool_choice": "none", "max_tokens": 12},
    ),
    "chat-reasoning-parser": Case(
        "/v1/chat/completions",
        {"messages": _HELLO, "logprobs": True, "top_logprobs": 1, "max_tokens": 10},
    ),
    "completion-logprobs": Case("/v1/completions", {"prompt": "Hello", "logprobs": 2, "max_tokens": 6}),
    "completion-echo-stop-two-prompts": Case(
        "/v1/completions",
        {"prompt": ["Hello", "The weather"], "echo": True, "stop": ["from"], "logprobs": 1, "max_tokens": 8},
    ),
}

#: How often each stream is asked for on each server (see the module's docstring).
STREAM_TRIES: Final = 5

Answer = tuple[int, str, bytes]  # status, media type, normalized body
Answers = dict[tuple[str, bool], set[Answer]]


def _requests() -> Iterator[tuple[str, Case, bool]]:
    for name, case in CASES.items():
        for stream in (False, True):
            yield name, case, stream


def ask(url: str) -> Answers:
    """Every case's answers from the server at ``url``, streamed and not (one request at a time)."""
    answers: Answers = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for name, case, stream in _requests():
            body = {"model": MODEL, "temperature": 0, **case.body, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            answers[(name, stream)] = set()
            for _ in range(STREAM_TRIES if stream else 1):
                response = client.post(case.path, json=body)
                media_type = response.headers.get("content-type", "").split(";")[0]
                answers[(name, stream)].add((response.status_code, media_type, normalized(response.content)))
    return answers


#: What is random per request: every ``id`` (a completion's, each stream chunk's, a tool call's) and ``created``.
_RANDOM: Final = ((re.compile(rb'"id":"[^"]*"'), b'"id":"<id>"'), (re.compile(rb'"created":\d+'), b'"created":0'))


def normalized(body: bytes) -> bytes:
    """``body`` with what is random per request (see :data:`_RANDOM`) replaced by fixed values."""
    for pattern, fixed in _RANDOM:
        body = pattern.sub(fixed, body)
    return body


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> ServedModel:
    folder = tmp_path_factory.mktemp("differential")
    profile = folder / "differential.yaml"
    profile.write_text(
        _PROFILE.format(model=tiny_models["tiny-tools"], template=REPO / "templates" / "tiny-chatml-tools.jinja")
    )
    return served_model(profile)


@pytest.fixture(scope="module")
def vllm_answers(served: ServedModel, tmp_path_factory: pytest.TempPathFactory) -> Answers:
    logs = tmp_path_factory.mktemp("vllm-logs")
    return asked(lambda: start_vllm(served, logs, env=SERVER_ENV), ask)


@pytest.fixture(scope="module")
def turnout_answers(served: ServedModel, tmp_path_factory: pytest.TempPathFactory) -> Answers:
    logs = tmp_path_factory.mktemp("turnout-logs")
    return asked(lambda: start_turnout(served.profile_path, logs, extra=("--no-preload",), env=SERVER_ENV), ask)


@pytest.mark.parametrize(("name", "stream"), [(name, stream) for name, _, stream in _requests()])
def test_turnout_answers_as_vllm_does(
    name: str,
    stream: bool,
    vllm_answers: Answers,
    turnout_answers: Answers,
) -> None:
    vllm, turnout = vllm_answers[(name, stream)], turnout_answers[(name, stream)]
    # A case vLLM refuses compares nothing worth comparing.
    assert all(status == 200 for status, _, _ in vllm), vllm
    if not vllm & turnout:
        # The one pair shown whole: the first difference is what to read.
        (_, vllm_type, vllm_body), (_, turnout_type, turnout_body) = min(vllm), min(turnout)
        assert (turnout_type, turnout_body) == (vllm_type, vllm_body)
        pytest.fail(f"no answer in common: vLLM's {vllm}, Turnout's {turnout}")


def test_the_normalizing_keeps_everything_but_ids_and_created() -> None:
    chunk = b'data: {"id":"chatcmpl-1","created":17,"model":"tools","choices":[{"text":"id: 3"}]}\n\n'
    assert normalized(chunk) == b'data: {"id":"<id>","created":0,"model":"tools","choices":[{"text":"id: 3"}]}\n\n'
