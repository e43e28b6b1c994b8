"""vLLM's serving objects for one model's generating and pooling routes, chat, completions and embeddings included.

`vllm serve` builds these in ``init_generate_state``, ``init_pooling_state`` and
``init_structured_decisions_state`` from its ``Namespace``; `ServingOperations` builds the same objects from
one model's frozen `FrontendSettings`, over that model's renderer and models registry, so its chat template,
tool parser and reasoning parser apply to the Responses and Messages APIs exactly as to chat. Each operation
(`server.frontend.operations.Operation`) is one route of vLLM's, answered as that route answers: the same
request model, the same JSON dump, the same SSE framing.

Chat, completions and embeddings come from `VllmFrontend` (which builds them as ``init_app_state`` does), through
`ServingOperations.attach`; tokenization is built here, as ``init_app_state`` builds it: every operation then takes
the one path of `ServingOperations.call`. Which operations there are, and the routes that serve them, is
``server/frontend/operations.py``'s table; this module's table holds only how each one calls vLLM (a bundle whose
table and that one differ is refused when it is built).

Written against vLLM 0.32.0, like the whole package (whose ``__init__`` checks the version first); what other
supported vLLMs differ in is `_moved`'s table.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from vllm.engine.protocol import EngineClient
from vllm.entrypoints.anthropic.protocol import AnthropicCountTokensRequest, AnthropicMessagesRequest
from vllm.entrypoints.anthropic.serving import AnthropicServingMessages
from vllm.entrypoints.generate.generative_scoring.serving import GenerativeScoringRequest, ServingGenerativeScoring
from vllm.entrypoints.mcp.tool_server import ToolServer
from vllm.entrypoints.openai.chat_completion.batch_serving import OpenAIServingChatBatch
from vllm.entrypoints.openai.chat_completion.protocol import BatchChatCompletionRequest, ChatCompletionRequest
from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
from vllm.entrypoints.openai.models.serving import OpenAIServingModels
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.entrypoints.openai.responses.serving import OpenAIServingResponses
from vllm.entrypoints.pooling.classify.protocol import ClassificationRequest
from vllm.entrypoints.pooling.classify.serving import ServingClassification
from vllm.entrypoints.pooling.embed.protocol import EmbeddingRequest
from vllm.entrypoints.pooling.pooling.protocol import PoolingRequest
from vllm.entrypoints.pooling.pooling.serving import ServingPooling
from vllm.entrypoints.pooling.scoring.protocol import RerankRequest, ScoreRequest
from vllm.entrypoints.pooling.scoring.serving import ServingScores
from vllm.entrypoints.pooling.utils import enable_scoring_api
from vllm.entrypoints.serve.tokenize.protocol import DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest
from vllm.entrypoints.serve.tokenize.serving import ServingTokenization
from vllm.entrypoints.serve.utils.request_logger import RequestLogger
from vllm.renderers.online_renderer import OnlineRenderer
from vllm.tasks import POOLING_TASKS, SupportedTask

from server.frontend.operations import OPERATIONS, SPEC_OF, WITHHELD, Operation
from server.frontend.results import BundleResult, JsonResult, StreamResult
from server.frontend.settings import FrontendSettings
from server.frontend.vllm_adapter._calls import Dump, bad_request, call_serving, parse_request, unsupported
from server.frontend.vllm_adapter._moved import moved, optional, supported_kwargs
from server.frontend.vllm_adapter._salted_requests import CohereEmbedRequest
from server.frontend.vllm_adapter._speech import REQUEST_BODIES as SPEECH_REQUEST_BODIES
from server.frontend.vllm_adapter._speech import VALIDATE_TRANSCRIPTION, VALIDATE_TRANSLATION, SpeechOperations

__all__ = ["OPERATIONS_VLLM_LACKS", "REQUEST_BODIES", "ServingContext", "ServingOperations", "chat_template_config"]

_log = logging.getLogger("server.frontend.vllm_adapter")


#: The request model of each operation's body, named as its OpenAPI component (``OperationSpec.body``).
REQUEST_BODIES: dict[str, Any] = {
    "ChatCompletionRequest": ChatCompletionRequest,
    "CompletionRequest": CompletionRequest,
    "EmbeddingRequest": EmbeddingRequest,
    "TokenizeRequest": TokenizeCompletionRequest | TokenizeChatRequest,
    "DetokenizeRequest": DetokenizeRequest,
    "ResponsesRequest": ResponsesRequest,
    "AnthropicMessagesRequest": AnthropicMessagesRequest,
    "AnthropicCountTokensRequest": AnthropicCountTokensRequest,
    "BatchChatCompletionRequest": BatchChatCompletionRequest,
    "GenerativeScoringRequest": GenerativeScoringRequest,
    "PoolingRequest": PoolingRequest,
    "ClassificationRequest": ClassificationRequest,
    "ScoreRequest": ScoreRequest,
    "RerankRequest": RerankRequest,
    "CohereEmbedRequest": CohereEmbedRequest,
    **SPEECH_REQUEST_BODIES,
}
_DECISION_REQUEST = optional("StructuredDecisionRequest")  # vLLM 0.32 and later
if _DECISION_REQUEST is not None:
    REQUEST_BODIES["StructuredDecisionRequest"] = _DECISION_REQUEST

#: The operations the installed vLLM predates (their route answers 404 "not supported" for every model).
OPERATIONS_VLLM_LACKS: frozenset[Operation] = frozenset(() if _DECISION_REQUEST else ("structured_decision",))


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingContext:
    """What every serving object of one model shares (built by `VllmFrontend`).

    Attributes:
        model_name: The served name.
        engine: What generating objects submit to (the bundle's recording stand-in for the engine).
        models: vLLM's models registry for this one model.
        renderer: The model's online renderer (its chat template, tool and reasoning parsers).
        logger: vLLM's request logger, or None.
        chat_template: The resolved chat template text, or None for the tokenizer's own.
        settings: The model's frontend settings.
        supported_tasks: What the engine says its model supports.
        tool_server: vLLM's tool server for the Responses API (shared by every model), or None.
    """

    model_name: str
    engine: EngineClient
    models: OpenAIServingModels
    renderer: OnlineRenderer
    logger: RequestLogger | None
    chat_template: str | None
    settings: FrontendSettings
    supported_tasks: tuple[SupportedTask, ...]
    tool_server: ToolServer | None = None


def _by_alias(response: pydantic.BaseModel) -> bytes:
    # The Responses router dumps by alias (`schema_` is sent as `schema`).
    return response.model_dump_json(by_alias=True).encode()


def _without_nulls(response: pydantic.BaseModel) -> bytes:
    # The Messages router drops unset fields, as Anthropic's API does.
    return response.model_dump_json(exclude_none=True).encode()


async def _responses_sse(events: AsyncIterator[Any]) -> AsyncIterator[str]:
    """The Responses stream framed as vLLM's router frames it: a named SSE event each, and no ``[DONE]``."""
    try:
        async for event in events:
            kind = getattr(event, "type", "unknown")
            yield f"event: {kind}\ndata: {event.model_dump_json(indent=None, by_alias=True)}\n\n"
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


def _validator(model: Any) -> Callable[[Any], Any]:
    # Several request types are unions of models; an adapter validates both kinds.
    return pydantic.TypeAdapter(model).validate_python


_Call = Callable[[Any], Awaitable[Any]]


def _embedding_request() -> Callable[[Any], Any]:
    validate = _validator(EmbeddingRequest)

    def checked(data: Any) -> Any:
        # Those formats are a binary body, which vLLM's router writes itself; a bundle only returns JSON.
        if data.get("encoding_format") in ("bytes", "bytes_only"):
            return bad_request("encoding_format must be 'float' or 'base64'", param="encoding_format")
        return validate(data)

    return checked


_EMBEDDING_REQUEST = _embedding_request()


def _tokenize_request(data: Any) -> Any:
    # As vLLM's /tokenize: chat `messages` are rendered with the template first, anything else is a prompt.
    model = TokenizeChatRequest if "messages" in data else TokenizeCompletionRequest
    return model.model_validate(data)


@dataclass(frozen=True, slots=True)
class _Route:
    """How one operation calls vLLM: how to validate its body, the serving call (None: the model's tasks lack
    it), how to dump its answer, whether its stream is framed as named events, and whether its request model
    takes the request id (the tokenization models do not: vLLM would log it as an ignored field)."""

    validate: Callable[[Any], Any] | None
    call: _Call | None
    dump: Dump | None = None
    named_events: bool = False
    request_id: bool = True


class ServingOperations:
    """vLLM's serving objects for one model's other routes, created as `vllm serve` creates them."""

    def __init__(self, context: ServingContext) -> None:
        self.model_name = context.model_name
        # vLLM's live registry of this model's LoRA adapters (filled once the bundle loaded them).
        self._adapters = context.models.lora_requests
        tasks = context.supported_tasks
        settings = context.settings
        model_config = context.models.model_config
        content_format = settings.chat_template_content_format
        generating = "generate" in tasks
        common: dict[str, Any] = {
            "online_renderer": context.renderer,
            "request_logger": context.logger,
            "chat_template": context.chat_template,
            "chat_template_content_format": content_format,
            "enable_auto_tools": settings.enable_auto_tool_choice,
            "tool_parser": settings.tool_call_parser,
            "reasoning_parser": settings.reasoning_parser or "",
            "default_chat_template_kwargs": dict(settings.default_chat_template_kwargs),
            "return_tokens_as_token_ids": settings.return_tokens_as_token_ids,
            "enable_prompt_tokens_details": settings.enable_prompt_tokens_details,
            "enable_force_include_usage": settings.enable_force_include_usage,
            "tool_strict_level": settings.tool_strict_level,
            "enable_log_outputs": settings.enable_log_outputs,
        }
        # Which settings each class takes, as vLLM's init_generate_state passes them.
        deltas: dict[str, Any] = {"enable_log_deltas": settings.enable_log_deltas}
        metrics: dict[str, Any] = {"enable_per_request_metrics": settings.enable_per_request_metrics}
        engine, models = context.engine, context.models
        self._responses = (
            OpenAIServingResponses(
                engine,
                models,
                tool_server=context.tool_server,
                **supported_kwargs(OpenAIServingResponses, {**common, **metrics}),
            )
            if generating
            else None
        )
        self._messages = (
            AnthropicServingMessages(
                engine,
                models,
                settings.response_role,
                **supported_kwargs(
                    AnthropicServingMessages,
                    {"disabled_thinking_effort": settings.anthropic_disabled_thinking_effort, **common, **deltas},
                ),
            )
            if generating
            else None
        )
        chat_only: dict[str, Any] = {
            "trust_request_chat_template": settings.trust_request_chat_template,
            "exclude_tools_when_tool_choice_none": settings.exclude_tools_when_tool_choice_none,
            **deltas,
            **metrics,
        }
        self._chat_batch = (
            OpenAIServingChatBatch(
                engine,
                models,
                settings.response_role,
                **supported_kwargs(OpenAIServingChatBatch, {**common, **chat_only}),
            )
            if generating
            else None
        )
        self._generative_scoring = (
            ServingGenerativeScoring(engine, models, request_logger=context.logger) if generating else None
        )
        self._decisions = _structured_decisions(context)
        pooling_task = model_config.get_pooling_task(tasks)
        template = chat_template_config(context.chat_template, settings)
        pooled: dict[str, Any] = {"request_logger": context.logger, "chat_template_config": template}
        self._pooling = (
            ServingPooling(engine, models, supported_tasks=tasks, **pooled)
            if any(task in POOLING_TASKS for task in tasks)
            else None
        )
        self._classification = (
            # Its __init__ is untyped (it passes **kwargs on to PoolingServing).
            ServingClassification(engine, models, **pooled)  # type: ignore[no-untyped-call]
            if pooling_task == "classify"
            else None
        )
        self._scores = (
            ServingScores(
                engine,
                models,
                supported_tasks=tasks,
                enable_flash_late_interaction=settings.enable_flash_late_interaction,
                **pooled,
            )
            if enable_scoring_api(tasks, model_config)
            else None
        )
        self._speech = SpeechOperations.for_tasks(
            tasks, engine, models, logger=context.logger, enable_force_include_usage=settings.enable_force_include_usage
        )
        # Every model has these, as vLLM's init_app_state builds them (the tokenizer's own, no engine).
        self._tokenization = ServingTokenization(
            models,
            context.renderer,
            request_logger=context.logger,
            chat_template=context.chat_template,
            chat_template_content_format=content_format,
            default_chat_template_kwargs=dict(settings.default_chat_template_kwargs),
            trust_request_chat_template=settings.trust_request_chat_template,
        )
        self._chat: OpenAIServingChat | None = None
        self._completion: OpenAIServingCompletion | None = None
        self._embedding: Callable[..., Awaitable[Any]] | None = None
        self._routes = self._route_table()

    def attach(
        self,
        *,
        chat: OpenAIServingChat | None,
        completion: OpenAIServingCompletion | None,
        embedding: Callable[..., Awaitable[Any]] | None,
    ) -> None:
        """Serve chat, completions, embeddings and Cohere's ``/v2/embed`` with the objects `VllmFrontend` built
        (None: the model's tasks lack the route)."""
        self._chat, self._completion, self._embedding = chat, completion, embedding
        self._routes = self._route_table()

    async def background_finished(self, response_id: str) -> None:
        """Return once the background response ``response_id`` has finished (at once when there is none)."""
        task = self._responses.background_tasks.get(response_id) if self._responses is not None else None
        if task is not None:
            await asyncio.wait([task])  # its own failure is recorded by vLLM in the stored response

    async def fail_background(self, response_id: str, error: Mapping[str, Any]) -> bool:
        """End the background response ``response_id`` as ``failed`` with ``error`` (OpenAI's ``{code, message}``).

        Retrieving it then shows why (a switch, an unload, the engine's death). vLLM's response object has no
        ``error`` field yet but takes extra fields, which it sends. Cancelling the task closes its generator,
        which aborts the engine request, as vLLM's own cancel does.

        Returns:
            Whether a queued or running background response was ended.
        """
        responses = self._responses
        if responses is None:
            return False
        async with responses.response_store_lock:
            response = responses.response_store.get(response_id)
            if response is None or response.status not in ("queued", "in_progress"):
                return False
            response.status = "failed"
            # An extra field (vLLM's model has extra="allow"), kept and dumped with the rest.
            setattr(response, "error", dict(error))  # noqa: B010 - not a declared field, so mypy would refuse it
        task = responses.background_tasks.get(response_id)
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        return True

    def supports(self, operation: Operation) -> bool:
        """Whether this model's tasks have `operation` (vLLM registers its route only then)."""
        return self._routes[operation].call is not None

    async def call(self, operation: Operation, body: Any, request_id: str) -> BundleResult:
        """Run `operation` on `body` (see `Operation`); never raises for a bad request."""
        route = self._routes[operation]
        if route.call is None:
            return unsupported(self.model_name, SPEC_OF[operation].api)
        if route.validate is None:
            if not isinstance(body, Mapping):
                return bad_request("The request body must be a JSON object.")
            request: Any = body
        else:
            request = parse_request(
                route.validate,
                body,
                model_name=self.model_name,
                request_id=request_id if route.request_id else None,
                adapters=self._adapters,
            )
            if isinstance(request, JsonResult):
                return request
        result = await call_serving(route.call(request), dump=route.dump)
        if route.named_events and isinstance(result, StreamResult):
            return StreamResult(_responses_sse(result.chunks))
        return result

    def _route_table(self) -> dict[Operation, _Route]:
        table = self._vllm_calls()
        if set(table) != set(OPERATIONS):
            # A new entry of operations.py without its call here, or the reverse: refused at once, not per request.
            raise RuntimeError(
                f"operations without a vLLM call: {sorted(set(OPERATIONS) - set(table))}; "
                f"vLLM calls of no operation: {sorted(set(table) - set(OPERATIONS))}"
            )
        return table

    def _vllm_calls(self) -> dict[Operation, _Route]:
        responses, messages, scores, speech = self._responses, self._messages, self._scores, self._speech
        tokenization = self._tokenization

        def present(serving: Any, call: _Call) -> _Call | None:
            return call if serving is not None else None

        async def not_found(response_id: str) -> Any:
            assert responses is not None
            return responses._make_not_found_error(response_id)

        # WITHHELD: the API layer asks for vLLM's answer to an id its store lacks (another API key's response),
        # whatever the store holds: vLLM's store is one per model, shared by every key.
        def create(request: Any) -> Awaitable[Any]:
            assert responses is not None
            # The body was checked as for any create; vLLM looks the previous id up first thing after.
            if (request.model_extra or {}).get(WITHHELD) and request.previous_response_id is not None:
                return not_found(request.previous_response_id)
            return responses.create_responses(request, None)

        def retrieve(args: Mapping[str, Any]) -> Awaitable[Any]:
            assert responses is not None
            if args.get(WITHHELD):
                return not_found(str(args["response_id"]))
            return responses.retrieve_responses(
                str(args["response_id"]), starting_after=args.get("starting_after"), stream=bool(args.get("stream"))
            )

        def cancel(args: Mapping[str, Any]) -> Awaitable[Any]:
            assert responses is not None
            if args.get(WITHHELD):
                return not_found(str(args["response_id"]))
            return responses.cancel_responses(str(args["response_id"]))

        def pooled(serving: Any) -> _Call | None:
            return (lambda request: serving(request, None)) if serving is not None else None

        chat, completion = self._chat, self._completion
        return {
            "chat.completions": _Route(
                ChatCompletionRequest.model_validate,
                present(chat, lambda request: chat.create_chat_completion(request, None)),  # type: ignore[union-attr]
            ),
            "completions": _Route(
                CompletionRequest.model_validate,
                present(completion, lambda request: completion.create_completion(request, None)),  # type: ignore[union-attr]
            ),
            "embeddings": _Route(_EMBEDDING_REQUEST, pooled(self._embedding)),
            "tokenize": _Route(
                _tokenize_request,
                lambda request: tokenization.create_tokenize(request, None),  # type: ignore[arg-type]
                request_id=False,
            ),
            "detokenize": _Route(
                DetokenizeRequest.model_validate,
                lambda request: tokenization.create_detokenize(request, None),  # type: ignore[arg-type]
                request_id=False,
            ),
            "tokenizer_info": _Route(None, lambda _: tokenization.get_tokenizer_info()),
            "responses.create": _Route(
                _validator(ResponsesRequest),
                present(responses, create),
                _by_alias,
                named_events=True,
            ),
            "responses.retrieve": _Route(None, present(responses, retrieve), _by_alias, named_events=True),
            "responses.cancel": _Route(None, present(responses, cancel), _by_alias),
            "messages.create": _Route(
                _validator(AnthropicMessagesRequest),
                present(messages, lambda request: messages.create_messages(request, None)),  # type: ignore[union-attr]
                _without_nulls,
            ),
            "messages.count_tokens": _Route(
                _validator(AnthropicCountTokensRequest),
                present(messages, lambda request: messages.count_tokens(request, None)),  # type: ignore[union-attr]
                _without_nulls,
            ),
            "chat.batch": _Route(
                _validator(BatchChatCompletionRequest),
                present(
                    self._chat_batch,
                    lambda request: self._chat_batch.create_batch_chat_completion(request, None),  # type: ignore[union-attr]
                ),
            ),
            "generative_scoring": _Route(
                _validator(GenerativeScoringRequest),
                present(
                    self._generative_scoring,
                    lambda request: self._generative_scoring.create_generative_scoring(request, None),  # type: ignore[union-attr]
                ),
            ),
            "structured_decision": _Route(
                _validator(_DECISION_REQUEST) if _DECISION_REQUEST is not None else None,
                present(self._decisions, lambda request: self._decisions.create_decision(request, None)),  # type: ignore[union-attr]
            ),
            "pooling": _Route(_validator(PoolingRequest), pooled(self._pooling)),
            "classify": _Route(_validator(ClassificationRequest), pooled(self._classification)),
            "score": _Route(_validator(ScoreRequest), pooled(scores)),
            "rerank": _Route(_validator(RerankRequest), pooled(scores)),
            "embed.cohere": _Route(_validator(CohereEmbedRequest), pooled(self._embedding)),
            "audio.transcriptions": _Route(VALIDATE_TRANSCRIPTION, speech.transcribe if speech is not None else None),
            "audio.translations": _Route(VALIDATE_TRANSLATION, speech.translate if speech is not None else None),
        }


def chat_template_config(chat_template: str | None, settings: FrontendSettings) -> Any:
    """vLLM's `ChatTemplateConfig` for the pooling routes, from the profile's template settings."""
    config_cls = moved("ChatTemplateConfig")
    return config_cls(
        **supported_kwargs(
            config_cls,
            {
                "chat_template": chat_template,
                "chat_template_content_format": settings.chat_template_content_format,
                "trust_request_chat_template": settings.trust_request_chat_template,
                "trust_request_mm_kwargs": settings.trust_request_mm_kwargs,
            },
        )
    )


def _structured_decisions(context: ServingContext) -> Any | None:
    """vLLM's ``/v1/systemone`` object, or None when no read strategy fits the model (vLLM then answers 501) or
    the installed vLLM predates it."""
    serving_cls, select_read_strategy = optional("ServingStructuredDecisions"), optional("select_read_strategy")
    if serving_cls is None or select_read_strategy is None:
        return None
    try:
        strategy_cls = select_read_strategy(context.models.model_config, context.supported_tasks)
        strategy = strategy_cls(
            moved("ReadContext")(
                engine_client=context.engine,
                online_renderer=context.renderer,
                chat_template=context.chat_template,
                chat_template_content_format=context.settings.chat_template_content_format,
                default_chat_template_kwargs=dict(context.settings.default_chat_template_kwargs),
            )
        )
    except ValueError as exc:
        _log.debug("/v1/systemone is disabled for this model: %s", exc)
        return None
    return serving_cls(context.models, strategy, request_logger=context.logger)
