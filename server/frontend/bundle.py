"""One model's OpenAI frontend: every serving operation over its live vLLM engine, on one path (`call`).

A bundle is built once per engine start and never changes afterwards; the engine manager hands the current one
to the API layer. It speaks dict bodies in and `JsonResult` / `StreamResult` out, so the API layer needs
neither vLLM nor pydantic. Everything vLLM-specific happens in `vllm_adapter`.

Aborting: every generating call records the engine request ids vLLM derived from our `request_id`, which
AsyncLLM maps to its internal ones (it appends a random suffix to each). `await bundle.abort(request_id)`
aborts them, and also catches engine requests submitted after the call. An aborted request is not an error in
vLLM: a stream ends with a chunk whose `finish_reason` is `"abort"` and then `data: [DONE]`; a non-streaming call
returns 200 with the partial text and `finish_reason: "abort"` in each choice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from vllm.engine.protocol import EngineClient

from server.frontend.inflight_registry import InflightRegistry
from server.frontend.operations import Operation
from server.frontend.recording_client import RecordingEngineClient
from server.frontend.releasing_stream import ReleasingStream
from server.frontend.results import BundleResult, JsonResult, StreamResult
from server.frontend.settings import FrontendSettings
from server.frontend.vllm_adapter import VllmFrontend

__all__ = ["FrontendBundle", "build_bundle"]

_Handler = Callable[[Any, str], Awaitable[BundleResult]]


class FrontendBundle:
    """One model's serving operations, all through `call`; immutable after `build_bundle`.

    Every operation takes the parsed JSON body (anything; non-objects get a 400) and never raises for a bad
    request: invalid bodies and vLLM's refusals come back as `JsonResult` with vLLM's status and an OpenAI
    error body `{"error": {"message", "type", "param", "code"}}`.

    Attributes:
        model_name: The served name; it replaces the body's `model`, since routing already happened.
        settings: What the bundle was built from.
        max_model_len: The engine's context length.
        supports_embeddings: The model is a pooling model with the `embed` task.
    """

    def __init__(
        self, *, model_name: str, settings: FrontendSettings, frontend: VllmFrontend, engine: EngineClient
    ) -> None:
        self.model_name = model_name
        self.settings = settings
        self.max_model_len = frontend.max_model_len
        self.supports_embeddings = frontend.supports_embeddings
        self._frontend = frontend
        self._operations = frontend.operations
        self._inflight = InflightRegistry(engine.abort)

    @property
    def adapters(self) -> tuple[str, ...]:
        """The model's LoRA adapters loaded into its engine (a request naming one gets it applied)."""
        return self._frontend.adapters

    async def call(self, operation: Operation, body: Any, request_id: str) -> BundleResult:
        """Run one of vLLM's routes (chat, completions, embeddings, tokenization, Responses, Messages, pooling, ...).

        A route the model's tasks lack answers 404 naming the model, as `vllm serve` (which does not register
        it) would. A stream is a `StreamResult` of vLLM's SSE strings (``data:`` chunks and ``[DONE]``); a
        Responses stream is framed as named SSE events without ``[DONE]``, a Messages stream as Anthropic's
        events. Cancelling the call aborts its engine request.

        Args:
            operation: Which route (see `server.frontend.operations`).
            body: The JSON body; for ``responses.retrieve`` / ``responses.cancel`` the path and query values.
            request_id: Our id for the request, unique among this bundle's running requests; the engine request
                ids derive from it (see `abort`), and a created response's id is this id.

        Raises:
            ValueError: `request_id` is already in flight in this bundle.
            asyncio.CancelledError: The call was cancelled; its engine request is aborted.

        A ``background: true`` Response runs in a task of vLLM's own, which a streaming reader only reads: the
        reader may go away (its stream closed) while the response goes on generating, to be retrieved. So its
        engine requests are not recorded under ``request_id``; ``fail_background`` (or vLLM's cancel) ends it.
        """
        detached = operation == "responses.create" and isinstance(body, Mapping) and body.get("background") is True
        call = lambda body, rid: self._operations.call(operation, body, rid)  # noqa: E731
        return await self._tracked(call, body, request_id, detached=detached)

    async def background_finished(self, response_id: str) -> None:
        """Return once the background Response ``response_id`` (``background: true``) has finished."""
        await self._operations.background_finished(response_id)

    async def fail_background(self, response_id: str, error: Mapping[str, Any]) -> bool:
        """End a queued or running background Response as ``failed`` with ``error``; whether there was one."""
        return await self._operations.fail_background(response_id, error)

    def supports(self, operation: Operation) -> bool:
        """Whether this model serves `operation` (its tasks have the route)."""
        return self._operations.supports(operation)

    async def abort(self, request_id: str) -> tuple[str, ...]:
        """Abort `request_id`'s engine requests, including those it has not submitted yet.

        A stream only submits its engine request when its first chunk is read, and vLLM ignores an abort that
        comes before; this one is remembered for it. An aborted request is no error: a stream ends with a
        `"finish_reason": "abort"` chunk and `[DONE]`, a non-streaming call returns 200 with the partial text and
        `"finish_reason": "abort"` in every choice.

        Returns:
            The engine request ids aborted at once (empty when none was running yet or `request_id` is not in
            flight here).
        """
        return await self._inflight.abort([request_id])

    async def _tracked(self, handle: _Handler, body: Any, request_id: str, *, detached: bool = False) -> BundleResult:
        with self._inflight.collect(request_id):
            try:
                result = await handle(body, request_id)
            except BaseException:
                self._inflight.release(request_id)
                raise
        if isinstance(result, JsonResult) or detached:
            self._inflight.release(request_id)
            return result

        async def abandon() -> None:
            await self._inflight.abort([request_id])

        # A stream keeps its engine ids until it is exhausted or closed.
        stream = ReleasingStream(result.chunks, abandon=abandon, release=lambda: self._inflight.release(request_id))
        return StreamResult(stream)


async def build_bundle(model_name: str, engine: EngineClient, settings: FrontendSettings) -> FrontendBundle:
    """Build the frontend bundle for the model `engine` is serving.

    Args:
        model_name: The served model name (what clients put in `model`).
        engine: The live engine (vLLM's `AsyncLLM`).
        settings: Parsers, chat template and the other frontend options for this model.

    Raises:
        FrontendConfigError: The settings name a parser vLLM does not have, or a chat template that cannot be
            read.
    """
    # The recorder quacks like an EngineClient: it forwards everything and notes the ids of what it submits.
    recorder = cast(EngineClient, RecordingEngineClient(engine))
    frontend = await VllmFrontend.open(model_name, engine=recorder, model_engine=engine, settings=settings)
    return FrontendBundle(model_name=model_name, settings=settings, frontend=frontend, engine=engine)
