"""A fake frontend bundle over :class:`FakeEngine`, returning the same result types as the real bundle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec

from server.frontend.openai_errors import error_body
from server.frontend.operations import WITHHELD, AudioUpload
from server.frontend.results import JsonResult, StreamResult
from server.profiles.schema import ModelProfile
from tests.fakes.engines import FakeEngine

__all__ = ["FakeServingBundle", "build_fake_serving_bundle"]


#: The tokenization operations' answers, by the model's name (nothing reaches the engine).
_TOKENIZATION: dict[str, Any] = {
    "tokenize": lambda name: {"tokens": [1, 2], "count": 2, "model": name},
    "detokenize": lambda name: {"prompt": name},
    "tokenizer_info": lambda name: {"tokenizer_class": "FakeTokenizer", "model": name},
}


class FakeServingBundle:
    """Answers with the tokens of its engine; ``max_tokens`` sets the length, ``step_s`` the pace, ``pad`` the size.

    ``pad`` repeats each streamed token that many times, so a test can fill the socket buffers quickly.
    """

    def __init__(self, name: str, profile: ModelProfile, engine: FakeEngine) -> None:
        self.name = name
        self.engine = engine
        self.max_model_len = 256
        self.auto_tools = bool(profile.enable_auto_tool_choice)
        #: Whether it answers the speech routes (vLLM's ``transcription`` task): a model path naming whisper.
        self.speech = "whisper" in profile.model
        self._running: dict[str, set[str]] = {}
        self._stored: dict[str, dict[str, Any]] = {}
        self._background: dict[str, asyncio.Task[None]] = {}
        #: Every body it was given, with the operation it came by.
        self.received: list[tuple[str, dict[str, Any]]] = []

    async def abort(self, request_id: str) -> tuple[str, ...]:
        ids = tuple(self._running.get(request_id, ()))
        await self.engine.abort(ids)
        return ids

    async def _chat(self, body: dict[str, Any], request_id: str) -> JsonResult | StreamResult:
        """Chat and completions alike: the engine's tokens, as a message or ``data:`` chunks and ``[DONE]``."""
        if body.get("tool_choice") == "auto" and not self.auto_tools:
            return JsonResult(400, error_body(400, '"auto" tool choice requires --enable-auto-tool-choice'))
        if body.get("fail"):
            raise RuntimeError("secret internal detail")
        engine_id = f"chatcmpl-{request_id}"
        self._running[request_id] = {engine_id}
        steps, step_s = int(body.get("max_tokens", 3)), float(body.get("step_s", 0.001))
        if body.get("stream"):
            return StreamResult(self._stream(request_id, engine_id, steps, step_s, int(body.get("pad", 1))))
        try:
            tokens = [t async for t in self.engine.generate(engine_id, steps, step_s)]
        finally:
            self._running.pop(request_id, None)
        finish = "abort" if engine_id in self.engine.aborted else "length"
        message = {"role": "assistant", "content": " ".join(tokens)}
        return JsonResult(200, {"model": self.name, "choices": [{"message": message, "finish_reason": finish}]})

    async def _stream(self, request_id: str, engine_id: str, steps: int, step_s: float, pad: int) -> AsyncIterator[str]:
        try:
            async for token in self.engine.generate(engine_id, steps, step_s):
                yield f"data: {msgspec.json.encode({'model': self.name, 'delta': token * pad}).decode()}\n\n"
        finally:
            self._running.pop(request_id, None)
        if engine_id in self.engine.aborted:
            yield 'data: {"finish_reason": "abort"}\n\n'
        yield "data: [DONE]\n\n"

    async def call(self, operation: str, body: dict[str, Any], request_id: str) -> JsonResult | StreamResult:
        """Chat and completions; the tokenization operations; Responses and Messages as the real bundle frames
        them (its own store); the rest is unsupported."""
        self.received.append((operation, body))
        if operation in _TOKENIZATION:
            return JsonResult(200, _TOKENIZATION[operation](self.name))
        if operation in ("chat.completions", "completions"):
            return await self._chat(body, request_id)
        if operation == "embeddings":
            return JsonResult(400, error_body(400, "The model does not support the Embeddings API"))
        if operation in ("responses.retrieve", "responses.cancel"):
            # As the real bundle: WITHHELD answers as for an id the store lacks (another key's response).
            stored = None if body.get(WITHHELD) else self._stored.get(body["response_id"])
            if stored is None:
                return _not_found(body["response_id"])
            if operation == "responses.cancel":
                if stored["status"] != "queued":
                    return JsonResult(400, error_body(400, "Cannot cancel a synchronous response."))
                stored["status"] = "cancelled"
                self._background[body["response_id"]].cancel()
            return JsonResult(200, stored)
        previous = body.get("previous_response_id") if operation == "responses.create" else None
        if previous is not None and (body.get(WITHHELD) or previous not in self._stored):
            return _not_found(previous)
        if operation in ("audio.transcriptions", "audio.translations") and self.speech:
            return await self._speech(body, request_id)
        if operation not in ("responses.create", "messages.create"):
            return JsonResult(404, error_body(404, f"The model '{self.name}' does not support it.", param="model"))
        if body.get("fail_with"):
            return JsonResult(int(body["fail_with"]), error_body(int(body["fail_with"]), "refused by the fake"))
        engine_id = f"{operation}-{request_id}"
        self._running[request_id] = {engine_id}
        steps, step_s = int(body.get("max_tokens", 3)), float(body.get("step_s", 0.001))
        if operation == "responses.create" and body.get("background") and not body.get("stream"):
            return self._start_background(request_id, engine_id, steps, step_s)
        if body.get("stream"):
            return StreamResult(self._api_stream(operation, request_id, engine_id, steps, step_s))
        try:
            text = " ".join([t async for t in self.engine.generate(engine_id, steps, step_s)])
        finally:
            self._running.pop(request_id, None)
        answer = {"id": request_id, "model": self.name, "text": text}
        self._stored[request_id] = answer
        return JsonResult(200, answer)

    async def _speech(self, form: dict[str, Any], request_id: str) -> JsonResult | StreamResult:
        """As vLLM's speech routes: a form with the audio as an `AudioUpload` ``file``; ``data:`` chunks and
        ``[DONE]`` when ``stream`` (a boolean by now: the API layer reads it before admission)."""
        upload = form.get("file")
        if not isinstance(upload, AudioUpload):
            return JsonResult(400, error_body(400, "file: Field required", param="file"))
        engine_id = f"transcribe-{request_id}"
        self._running[request_id] = {engine_id}
        steps, step_s = int(form.get("max_completion_tokens", 3)), float(form.get("step_s", 0.001))
        if form.get("stream") is True:
            return StreamResult(self._stream(request_id, engine_id, steps, step_s, 1))
        try:
            text = " ".join([t async for t in self.engine.generate(engine_id, steps, step_s)])
        finally:
            self._running.pop(request_id, None)
        heard = {
            "filename": upload.filename,
            "size": len(upload.data),
            "fields": sorted(form),
            "granularities": form.get("timestamp_granularities[]"),
            "stream": form.get("stream"),
        }
        return JsonResult(200, {"text": text, "model": self.name, "heard": heard})

    def _start_background(self, request_id: str, engine_id: str, steps: int, step_s: float) -> JsonResult:
        """As vLLM: store the response ``queued``, answer with it, generate in a task that completes it."""
        queued = {"id": request_id, "model": self.name, "status": "queued"}
        self._stored[request_id] = dict(queued)

        async def generate() -> None:
            try:
                text = " ".join([t async for t in self.engine.generate(engine_id, steps, step_s)])
            finally:
                self._running.pop(request_id, None)
            self._stored[request_id] = {**queued, "status": "completed", "text": text}

        self._background[request_id] = asyncio.create_task(generate())
        return JsonResult(200, queued)

    async def background_finished(self, response_id: str) -> None:
        if (task := self._background.get(response_id)) is not None:
            await asyncio.wait([task])

    async def fail_background(self, response_id: str, error: Mapping[str, Any]) -> bool:
        stored = self._stored.get(response_id)
        if stored is None or stored["status"] != "queued":
            return False
        stored.update(status="failed", error=dict(error))
        task = self._background[response_id]
        task.cancel()  # as vLLM's: the engine request ends with its generator
        await asyncio.wait([task])
        return True

    async def _api_stream(
        self, operation: str, request_id: str, engine_id: str, steps: int, step_s: float
    ) -> AsyncIterator[str]:
        kind = "response.output_text.delta" if operation == "responses.create" else "content_block_delta"
        try:
            async for token in self.engine.generate(engine_id, steps, step_s):
                yield f"event: {kind}\ndata: {msgspec.json.encode({'model': self.name, 'delta': token}).decode()}\n\n"
        finally:
            self._running.pop(request_id, None)
        last = "response.completed" if operation == "responses.create" else "message_stop"
        yield f'event: {last}\ndata: {{"type": "{last}"}}\n\n'


def _not_found(response_id: str) -> JsonResult:
    """vLLM's answer for a response id its store lacks."""
    return JsonResult(404, error_body(404, f"Response with id '{response_id}' not found.", param="response_id"))


async def build_fake_serving_bundle(name: str, profile: ModelProfile, engine: FakeEngine) -> FakeServingBundle:
    return FakeServingBundle(name, profile, engine)
