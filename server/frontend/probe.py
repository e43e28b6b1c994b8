"""The fixed probe a switch proves a model with, run through the model's own bundle.

The probe goes through the bundle's own operation call (its chat template, tokenizer, engine and detokenizer), so an
engine that answers for another bundle's model shows as well as wrong weights: chat where the model has a template,
else a completion, else an embedding vector. Greedy, a few prompt and output tokens, the top two logprobs of each
output token as token ids, and a cache salt of its own, so neither vLLM's prefix cache nor kept blocks can answer
it (its prompt is shorter than one KV block, so nothing is kept of it either).
"""

from __future__ import annotations

import secrets
from typing import Any, Final, Protocol

import msgspec

from server.frontend.operations import Operation
from server.frontend.results import BundleResult, JsonResult

__all__ = ["PROBE_OUTPUT_TOKENS", "ProbeAnswer", "probe_bundle"]

#: Output tokens per probe: enough that a stale model's drift shows, few enough to cost one short decode (on the
#: demo models each decode step costs about 2 ms of the probe's 7-9 ms; rendering and tokenizing under 0.5 ms).
PROBE_OUTPUT_TOKENS: Final = 3
_PROMPT: Final = "Hi"
_TOKEN_ID_PREFIX: Final = "token_id:"


class ProbeAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What one probe read (the engine's ``ProbeReading``): output token ids, the top two ``(token id, logprob)``
    pairs per position, a pooling model's vector, or why the probe could not drive the model."""

    tokens: list[int] = msgspec.field(default_factory=list)
    top: list[list[tuple[int, float]]] = msgspec.field(default_factory=list)
    vector: list[float] | None = None
    skipped: str | None = None


class _Bundle(Protocol):
    """What the probe calls on a bundle (``FrontendBundle``'s own methods)."""

    async def call(self, operation: Operation, body: Any, request_id: str) -> BundleResult: ...


async def probe_bundle(bundle: _Bundle) -> ProbeAnswer:
    """Run the probe through ``bundle`` (see the module's docstring); never raises for a model it cannot drive."""
    salt = f"turnout-probe-{secrets.token_hex(8)}"
    request_id = f"probe-{secrets.token_hex(8)}"
    common = {
        "max_tokens": PROBE_OUTPUT_TOKENS,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_tokens_as_token_ids": True,
        "cache_salt": salt,
    }
    chat = {**common, "messages": [{"role": "user", "content": _PROMPT}], "logprobs": True, "top_logprobs": 2}
    result = await bundle.call("chat.completions", chat, request_id)
    if _ok(result):
        return _chat_reading(_payload(result))
    result = await bundle.call("completions", {**common, "prompt": _PROMPT, "logprobs": 2}, request_id)
    if _ok(result):
        return _completion_reading(_payload(result))
    # A model without either (a pooling model's routes answer 404) is probed by its vector.
    result = await bundle.call("embeddings", {"input": _PROMPT, "cache_salt": salt}, request_id)
    if _ok(result):
        return ProbeAnswer(vector=[float(x) for x in _payload(result)["data"][0]["embedding"]])
    return ProbeAnswer(skipped=f"no chat, completion or embedding answered the probe: {_error(result)}")


def _ok(result: BundleResult) -> bool:
    return isinstance(result, JsonResult) and result.status_code == 200


def _payload(result: BundleResult) -> dict[str, Any]:
    assert isinstance(result, JsonResult)
    return result.payload


def _error(result: BundleResult) -> str:
    if not isinstance(result, JsonResult):
        return "a stream"
    error = result.payload.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return f"{result.status_code} {message or ''}".strip()


def _token_id(token: str) -> int:
    """``token_id:N`` (``return_tokens_as_token_ids``) as ``N``."""
    return int(token.removeprefix(_TOKEN_ID_PREFIX))


def _chat_reading(payload: dict[str, Any]) -> ProbeAnswer:
    content = payload["choices"][0]["logprobs"]["content"]
    tokens = [_token_id(item["token"]) for item in content]
    top = [[(_token_id(alt["token"]), float(alt["logprob"])) for alt in item["top_logprobs"][:2]] for item in content]
    return ProbeAnswer(tokens=tokens, top=top)


def _completion_reading(payload: dict[str, Any]) -> ProbeAnswer:
    logprobs = payload["choices"][0]["logprobs"]
    tokens = [_token_id(token) for token in logprobs["tokens"]]
    top = [
        sorted(((_token_id(token), float(lp)) for token, lp in alts.items()), key=lambda pair: -pair[1])[:2]
        for alts in logprobs["top_logprobs"]
    ]
    return ProbeAnswer(tokens=tokens, top=top)
