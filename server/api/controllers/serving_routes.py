"""The rest of vLLM's serving routes, each answered by the bundle of the model the request was admitted to.

Responses (create, retrieve, cancel), Anthropic Messages (in Anthropic's error shape), chat batch, generative
scoring, structured decisions, and the pooling routes (pooling, classify, score, rerank, Cohere's embed) in every
path vLLM's server registers them. A model whose tasks lack a route answers 404 naming the model, as `vllm serve`
(which would not register it) does. ``tests/api/test_route_parity.py`` holds this table equal to vLLM's.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Stream

from server.api.admission import AdmittedRequest, Holder, ServingBundle, hold_background_response, install_abort_hook
from server.api.controllers.bundle_routes import ADMITTED, bundle_route, operation_call
from server.api.controllers.stored_responses import StoredResponses
from server.api.edge import allowed_model, request_holder, request_scope, visible
from server.api.errors import ANTHROPIC_API, ANTHROPIC_EXCEPTION_HANDLERS, RESPONSES_API
from server.api.openapi import request_body
from server.api.streaming import answer, respond
from server.engine import EngineManager
from server.frontend import WITHHELD, Operation

__all__ = ["MessagesController", "ResponsesController", "ServingController", "SpeechController"]


class ResponsesController(Controller):
    """``/v1/responses``: OpenAI's Responses API, with the admitted model's chat template and parsers."""

    path = "/v1/responses"
    tags = ["OpenAI"]

    @post("/", operation_class=request_body("ResponsesRequest"), dependencies=ADMITTED, status_code=200)
    async def create_response(
        self,
        request: Request[Any, Any, Any],
        admitted: NamedDependency[Any],
        stored_responses: NamedDependency[StoredResponses],
    ) -> Response[Any] | Stream:
        """Create a response (``stream: true`` for SSE events); its id is kept to find its model (and key) again.

        A ``background: true`` response holds its model until it ends; a switch ends it as ``failed``.
        ``admitted`` is a ``waiting.AdmittedOrWaiting`` (declared Any: msgspec refuses a union of two dataclasses).
        """
        holder = request_holder(request)

        async def create(admitted: AdmittedRequest) -> Any:
            lease, body = admitted.lease, admitted.body
            previous = body.get("previous_response_id")
            if isinstance(previous, str) and stored_responses.withheld(previous, holder):
                # Another key's response: the bundle checks the body as for any create, then answers as vLLM does
                # an unknown previous id (checked first, a bad body would tell a withheld id from an unknown one).
                body = {**body, WITHHELD: True}
            stored_responses.record(lease.request_id, lease.model, lease.bundle, holder)
            result = await admitted.bundle.call("responses.create", body, lease.request_id)
            hold_background_response(admitted, result)
            return result

        return await answer(admitted, create, RESPONSES_API)

    @get("/{response_id:str}")
    async def retrieve_response(
        self,
        request: Request[Any, Any, Any],
        response_id: FromPath[str],
        manager: NamedDependency[EngineManager[ServingBundle]],
        stored_responses: NamedDependency[StoredResponses],
        starting_after: FromQuery[int | None] = None,
        stream: FromQuery[bool] = False,
    ) -> Response[Any] | Stream:
        """A stored response (``stream=true`` replays its events) from the model that created it."""
        args = {"response_id": response_id, "starting_after": starting_after, "stream": stream}
        return await _on_owner(request, manager, stored_responses, response_id, "responses.retrieve", args)

    @post("/{response_id:str}/cancel", status_code=200)
    async def cancel_response(
        self,
        request: Request[Any, Any, Any],
        response_id: FromPath[str],
        manager: NamedDependency[EngineManager[ServingBundle]],
        stored_responses: NamedDependency[StoredResponses],
    ) -> Response[Any] | Stream:
        """Cancel a background response of the model that created it."""
        args = {"response_id": response_id}
        return await _on_owner(request, manager, stored_responses, response_id, "responses.cancel", args)


async def _on_owner(
    request: Request[Any, Any, Any],
    manager: EngineManager[ServingBundle],
    stored: StoredResponses,
    response_id: str,
    operation: Operation,
    args: dict[str, Any],
) -> Response[Any] | Stream:
    """Run a stored-response operation on the bundle that stores ``response_id``, or 404 saying why it cannot.

    A response of a model the API key may not use, or created with another key, is looked up as an id this
    server never made: the active model's bundle answers vLLM's own "not found" (``withheld``), by the path an
    unknown id takes.
    """
    holder = request_holder(request)
    owner = stored.owner(response_id, holder)
    if owner is not None and not visible(request, owner.model):
        owner = None
    if owner is None and holder is not None:
        args = {**args, **_withheld(response_id)}
    active = manager.active_model
    owner_model = owner.model if owner is not None else None
    name = allowed_model(request, owner_model, owner_model, active, manager.switching_to)
    if owner is not None and owner.model != active:
        # Never load a model just to look something up: its store went with its engine anyway. A key limited to
        # some models is not told the name of an active model outside them.
        shown = f" (the active model is {active!r})" if active is not None and visible(request, active) else ""
        raise NotFoundException(
            f"Response {response_id!r} was created by model {owner.model!r}, which is not loaded now{shown}; "
            "stored responses live in their model's engine and end with it."
        )
    lease = await manager.acquire(name)
    install_abort_hook(lease)
    admitted = AdmittedRequest(manager=manager, lease=lease, body=args, scope=request_scope(request))
    try:
        if owner is not None and owner.bundle() is not lease.bundle:
            raise NotFoundException(
                f"Response {response_id!r} was stored by an earlier engine of model {owner.model!r}; the model "
                "was switched away and reloaded since, and stored responses end with their engine."
            )
        result = await lease.bundle.call(operation, args, lease.request_id)
        return respond(admitted, result, RESPONSES_API)
    finally:
        admitted.let_go(Holder.ROUTE)


def _withheld(response_id: str) -> dict[str, Any]:
    """A stored-response operation's arguments that the bundle answers as for an id vLLM's store lacks."""
    return {"response_id": response_id, WITHHELD: True}


class MessagesController(Controller):
    """``/v1/messages``: Anthropic's Messages API; every error in Anthropic's shape, streams end in its events."""

    path = "/v1/messages"
    tags = ["Anthropic"]
    exception_handlers = ANTHROPIC_EXCEPTION_HANDLERS

    create_message = bundle_route(
        "/",
        "AnthropicMessagesRequest",
        "create_message",
        operation_call("messages.create"),
        "Create a message (``stream: true`` for Anthropic's SSE events) with the active model's frontend.",
        ANTHROPIC_API,
    )
    count_message_tokens = bundle_route(
        "/count_tokens",
        "AnthropicCountTokensRequest",
        "count_message_tokens",
        operation_call("messages.count_tokens"),
        "Count the prompt tokens of a Messages request, rendered with the model's chat template.",
        ANTHROPIC_API,
    )


def _route(path: str, component: str, name: str, operation: Operation, summary: str) -> Any:
    return bundle_route(path, component, name, operation_call(operation), summary)


class ServingController(Controller):
    """Chat batch, generative scoring, structured decisions and the pooling routes, at vLLM's paths."""

    path = "/"
    tags = ["vLLM"]

    chat_batch = _route(
        "/v1/chat/completions/batch",
        "BatchChatCompletionRequest",
        "chat_completions_batch",
        "chat.batch",
        "Several chat conversations in one request (vLLM's batch chat API).",
    )
    generative_scoring = _route(
        "/generative_scoring",
        "GenerativeScoringRequest",
        "generative_scoring",
        "generative_scoring",
        "Score items by the probability of label tokens (generate models).",
    )
    structured_decision = _route(
        "/v1/systemone",
        "StructuredDecisionRequest",
        "structured_decision",
        "structured_decision",
        "Answer multiple-choice questions about inputs (vLLM's structured decisions API).",
    )
    pooling = _route("/pooling", "PoolingRequest", "pooling", "pooling", "Pooled outputs (pooling models).")
    classify = _route("/classify", "ClassificationRequest", "classify", "classify", "Classify (classification models).")
    score = _route("/score", "ScoreRequest", "score", "score", "Score text pairs (embedding or cross-encoder models).")
    score_v1 = _route("/v1/score", "ScoreRequest", "score_v1", "score", "As /score.")
    rerank = _route("/rerank", "RerankRequest", "rerank", "rerank", "Rerank documents for a query (Jina/Cohere style).")
    rerank_v1 = _route("/v1/rerank", "RerankRequest", "rerank_v1", "rerank", "As /rerank.")
    rerank_v2 = _route("/v2/rerank", "RerankRequest", "rerank_v2", "rerank", "As /rerank.")
    cohere_embed = _route("/v2/embed", "CohereEmbedRequest", "cohere_embed", "embed.cohere", "Cohere's embed API.")


class SpeechController(Controller):
    """``/v1/audio``: OpenAI's speech-to-text routes (speech models: vLLM's ``transcription`` task).

    The body is a multipart form (``forms.py``), forwarded to the model's vLLM transcription or translation
    object; ``stream=true`` answers OpenAI's transcription chunks as SSE, ending in ``[DONE]``.
    """

    path = "/v1/audio"
    tags = ["OpenAI"]

    create_transcription = bundle_route(
        "/transcriptions",
        "TranscriptionRequest",
        "create_transcription",
        operation_call("audio.transcriptions"),
        "Transcribe an audio file (speech models).",
        form="Transcriptions",
    )
    create_translation = bundle_route(
        "/translations",
        "TranslationRequest",
        "create_translation",
        operation_call("audio.translations"),
        "Translate an audio file into English text (speech models).",
        form="Translations",
    )
