"""The serving operations a bundle runs, one entry each: every route of vLLM's that Turnout serves, chat included.

:data:`OPERATION_SPECS` is the one table of them. Each entry names the operation (what ``bundle.call`` takes), the
API vLLM names in its 404, and the route that serves it: its path (and vLLM's other paths for it), the OpenAPI
component of its request body, its handler's name and summary, its OpenAPI tag and its error shape. The API layer
builds its handlers from the table (``server/api/controllers/bundle_routes.py``: ``operation_routes``); the adapter
maps each name onto vLLM's serving object (``server/frontend/vllm_adapter/_operations.py``: its table of handlers,
checked against this one whenever a bundle is built). A new route of vLLM's is one entry here and its vLLM handler
in the adapter. Nothing here imports vLLM or a web framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = ["OPERATIONS", "OPERATION_SPECS", "SPEC_OF", "WITHHELD", "AudioUpload", "Operation", "OperationSpec"]

Operation: TypeAlias = str
"""A serving operation: the name of an entry of :data:`OPERATION_SPECS`. ``responses.retrieve`` and
``responses.cancel`` take ``{"response_id", ...}`` bodies built from the path and query (with :data:`WITHHELD` they
answer as for an id vLLM's store lacks, whatever it holds: another API key's response; so does ``responses.create``
for its ``previous_response_id``); ``tokenizer_info`` takes an empty body; the two ``audio.*`` operations take the
request's multipart form fields, its ``file`` an `AudioUpload`; the others take the request's JSON body."""

#: The body key (set true) by which the API layer asks the Responses operations to answer the response id they
#: name as one vLLM's store lacks: another API key's response (vLLM's store is one per model, shared by every key).
WITHHELD: Final = "turnout_withheld"


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationSpec:
    """One serving operation and the route that serves it.

    Attributes:
        name: The operation (``bundle.call(name, ...)``).
        api: vLLM's name for its API: a model whose tasks lack it answers 404 "does not support the {api} API";
            a form route's name in the edge checks.
        path: Its POST route, which admits the body to the model it names and answers with the bundle's result;
            None where a handler of its own serves it (the Responses routes keep response ids, ``/tokenizer_info``
            is a GET behind a flag): ``server/api/controllers/``.
        also: vLLM's other paths for the same route; each gets a handler named ``{handler}_{first segment}``
            (``score_v1``), summarised "As {path}.".
        body: The OpenAPI component of its request body: vLLM's request model's name (the adapter's
            ``REQUEST_BODIES`` holds the model).
        handler: The handler's name (the operation's summary in the OpenAPI document: ``Create Message``).
        summary: The handler's docstring.
        tag: Its OpenAPI tag.
        anthropic: Errors in Anthropic's shape and streams ending in its events (``/v1/messages``), else OpenAI's.
        form: Its body is a multipart form (vLLM's speech routes), limited to vLLM's audio upload size.
    """

    name: Operation
    api: str
    path: str | None = None
    also: tuple[str, ...] = ()
    body: str = ""
    handler: str = ""
    summary: str = ""
    tag: str = "vLLM"
    anthropic: bool = False
    form: bool = False


#: Every operation, in the order the API documents them.
OPERATION_SPECS: Final[tuple[OperationSpec, ...]] = (
    OperationSpec(
        name="chat.completions",
        api="Chat Completions",
        path="/v1/chat/completions",
        body="ChatCompletionRequest",
        handler="chat_completions",
        summary="Create a chat completion (``stream: true`` for SSE) with the active model's frontend.",
        tag="OpenAI",
    ),
    OperationSpec(
        name="completions",
        api="Completions",
        path="/v1/completions",
        body="CompletionRequest",
        handler="completions",
        summary="Create a text completion (``stream: true`` for SSE).",
        tag="OpenAI",
    ),
    OperationSpec(
        name="embeddings",
        api="Embeddings",
        path="/v1/embeddings",
        body="EmbeddingRequest",
        handler="embeddings",
        summary="Create embeddings (pooling models only).",
        tag="OpenAI",
    ),
    OperationSpec(
        name="tokenize",
        api="Tokenization",
        path="/tokenize",
        body="TokenizeRequest",
        handler="tokenize",
        summary="Tokenize a prompt or a chat (rendered with the model's chat template).",
        tag="Tokenization",
    ),
    OperationSpec(
        name="detokenize",
        api="Tokenization",
        path="/detokenize",
        body="DetokenizeRequest",
        handler="detokenize",
        summary="Turn token ids back into text.",
        tag="Tokenization",
    ),
    OperationSpec(name="tokenizer_info", api="Tokenization"),
    OperationSpec(name="responses.create", api="Responses"),
    OperationSpec(name="responses.retrieve", api="Responses"),
    OperationSpec(name="responses.cancel", api="Responses"),
    OperationSpec(
        name="messages.create",
        api="Messages",
        path="/v1/messages",
        body="AnthropicMessagesRequest",
        handler="create_message",
        summary="Create a message (``stream: true`` for Anthropic's SSE events) with the active model's frontend.",
        tag="Anthropic",
        anthropic=True,
    ),
    OperationSpec(
        name="messages.count_tokens",
        api="Messages",
        path="/v1/messages/count_tokens",
        body="AnthropicCountTokensRequest",
        handler="count_message_tokens",
        summary="Count the prompt tokens of a Messages request, rendered with the model's chat template.",
        tag="Anthropic",
        anthropic=True,
    ),
    OperationSpec(
        name="chat.batch",
        api="Chat Completions",
        path="/v1/chat/completions/batch",
        body="BatchChatCompletionRequest",
        handler="chat_completions_batch",
        summary="Several chat conversations in one request (vLLM's batch chat API).",
    ),
    OperationSpec(
        name="generative_scoring",
        api="Generative Scoring",
        path="/generative_scoring",
        body="GenerativeScoringRequest",
        handler="generative_scoring",
        summary="Score items by the probability of label tokens (generate models).",
    ),
    OperationSpec(
        name="structured_decision",
        api="Structured Decisions",
        path="/v1/systemone",
        body="StructuredDecisionRequest",
        handler="structured_decision",
        summary="Answer multiple-choice questions about inputs (vLLM's structured decisions API).",
    ),
    OperationSpec(
        name="pooling",
        api="Pooling",
        path="/pooling",
        body="PoolingRequest",
        handler="pooling",
        summary="Pooled outputs (pooling models).",
    ),
    OperationSpec(
        name="classify",
        api="Classification",
        path="/classify",
        body="ClassificationRequest",
        handler="classify",
        summary="Classify (classification models).",
    ),
    OperationSpec(
        name="score",
        api="Score",
        path="/score",
        also=("/v1/score",),
        body="ScoreRequest",
        handler="score",
        summary="Score text pairs (embedding or cross-encoder models).",
    ),
    OperationSpec(
        name="rerank",
        api="Rerank",
        path="/rerank",
        also=("/v1/rerank", "/v2/rerank"),
        body="RerankRequest",
        handler="rerank",
        summary="Rerank documents for a query (Jina/Cohere style).",
    ),
    OperationSpec(
        name="embed.cohere",
        api="Embed",
        path="/v2/embed",
        body="CohereEmbedRequest",
        handler="cohere_embed",
        summary="Cohere's embed API.",
    ),
    OperationSpec(
        name="audio.transcriptions",
        api="Transcriptions",
        path="/v1/audio/transcriptions",
        body="TranscriptionRequest",
        handler="create_transcription",
        summary="Transcribe an audio file (speech models).",
        tag="OpenAI",
        form=True,
    ),
    OperationSpec(
        name="audio.translations",
        api="Translations",
        path="/v1/audio/translations",
        body="TranslationRequest",
        handler="create_translation",
        summary="Translate an audio file into English text (speech models).",
        tag="OpenAI",
        form=True,
    ),
)

#: Every operation's name, in the table's order.
OPERATIONS: Final[tuple[Operation, ...]] = tuple(spec.name for spec in OPERATION_SPECS)

#: Each operation's entry, by name.
SPEC_OF: Final[dict[Operation, OperationSpec]] = {spec.name: spec for spec in OPERATION_SPECS}


@dataclass(frozen=True, slots=True)
class AudioUpload:
    """The ``file`` part of a speech request's multipart form, read by the API layer.

    Attributes:
        data: The file's bytes, as uploaded (vLLM decodes them: WAV, FLAC, MP3, ...).
        filename: The name the client gave, if any.
        content_type: The part's content type, if any.
    """

    data: bytes
    filename: str | None = None
    content_type: str | None = None
