"""vLLM's speech-to-text serving objects for one model: ``/v1/audio/transcriptions`` and ``/v1/audio/translations``.

`vllm serve` builds `OpenAIServingTranscription` and `OpenAIServingTranslation` in ``init_speech_to_text_state``
when the model's tasks include ``transcription`` (Whisper and the other ASR models); `SpeechOperations` builds
the same two objects over the model's registry and answers as vLLM's two routers do: the form validated into
vLLM's request model, the upload read with vLLM's own size limit (``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``, checked
by ``read_upload_with_limit``), the response's ``model_dump`` as JSON, a stream as vLLM's ``data:`` chunks and
``[DONE]``.

vLLM's request models declare ``file`` as FastAPI's ``UploadFile``, which validates only a Starlette upload. The
frontend imports no web framework (``tests/frontend/test_boundaries.py``), so the class is taken from the request
model's own field: this module follows vLLM's contract, whatever class that names.

vLLM's speech requests take no ``cache_salt``, and its speech serving builds the engine's prompts itself (one per
audio chunk, and Whisper's language detection): the salt the API layer put in the form (its key's group:
``server/api/edge/cache_salts.py``) is put on each prompt as the speech objects submit it (`_SaltingEngine`), so a key's
audio reaches only its own group's prefix-cache blocks.

Written against vLLM 0.32.0, like `vllm_adapter` (which imports this module after its version check); what other
supported vLLMs differ in is `_moved`'s table.
"""

from __future__ import annotations

import io
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Final, cast

from vllm.engine.protocol import EngineClient
from vllm.entrypoints.openai.models.serving import OpenAIServingModels
from vllm.entrypoints.serve.utils.request_logger import RequestLogger
from vllm.entrypoints.speech_to_text.base.utils import read_upload_with_limit
from vllm.entrypoints.speech_to_text.transcription.protocol import TranscriptionRequest
from vllm.entrypoints.speech_to_text.transcription.serving import OpenAIServingTranscription
from vllm.entrypoints.speech_to_text.translation.protocol import TranslationRequest
from vllm.entrypoints.speech_to_text.translation.serving import OpenAIServingTranslation
from vllm.tasks import SupportedTask

from server.frontend.operations import AudioUpload
from server.frontend.vllm_adapter._salted_requests import check_cache_salt

__all__ = [
    "REQUEST_BODIES",
    "SPEECH_TASK",
    "VALIDATE_TRANSCRIPTION",
    "VALIDATE_TRANSLATION",
    "SpeechCall",
    "SpeechOperations",
]

#: The task whose models vLLM serves both speech routes for (``register_speech_to_text_api_routers``).
SPEECH_TASK: Final = "transcription"

#: The request model of each speech route's form, named as its OpenAPI component.
REQUEST_BODIES: dict[str, Any] = {
    "TranscriptionRequest": TranscriptionRequest,
    "TranslationRequest": TranslationRequest,
}


@dataclass(frozen=True, slots=True)
class _RawRequest:
    """What vLLM's speech serving reads of the HTTP request it is given: the ``X-Request-Id`` header (the base of
    its engine request ids, here our request id, as every other route's) and a ``state`` it writes metadata to."""

    headers: Mapping[str, str]
    state: SimpleNamespace = field(default_factory=SimpleNamespace)


@dataclass(frozen=True, slots=True)
class SpeechCall:
    """A validated speech request and the request id its engine requests derive from."""

    request: TranscriptionRequest | TranslationRequest
    request_id: str


def _validator(model: type[TranscriptionRequest | TranslationRequest]) -> Callable[[Any], SpeechCall]:
    upload_class = model.model_fields["file"].annotation
    assert isinstance(upload_class, type)

    def validate(form: dict[str, Any]) -> SpeechCall:
        data = dict(form)
        request_id = str(data.pop("request_id"))
        upload = data.get("file")
        if isinstance(upload, AudioUpload):
            # vLLM's router reads the upload itself; a Starlette upload over the bytes the API layer read.
            data["file"] = upload_class(file=io.BytesIO(upload.data), size=len(upload.data), filename=upload.filename)
        return SpeechCall(model.model_validate(data), request_id)

    return validate


#: The ``cache_salt`` of the speech call under way in this task (None: none), for the prompts it submits.
_CALL_SALT: ContextVar[str | None] = ContextVar("turnout_speech_cache_salt", default=None)


def _salted(prompt: Any, salt: str) -> Any:
    """``prompt`` (a prompt dict, or a rendered engine input) with ``cache_salt`` set to ``salt``.

    An encoder-decoder prompt (Whisper) gets it on both sides: vLLM reads a rendered input's salt off its decoder
    side, and a prompt's off its encoder side as it renders it. A text prompt (never built by the speech serving)
    is left alone.
    """
    if not isinstance(prompt, dict):
        return prompt
    if "decoder_prompt" in prompt:
        sides = ("encoder_prompt", "decoder_prompt")
        return {**prompt, **{side: _salted(prompt[side], salt) for side in sides if side in prompt}}
    return {**prompt, "cache_salt": salt}


class _SaltingEngine:
    """The engine as the speech objects see it: each prompt they submit carries the call's ``cache_salt``.

    Only `generate` is intercepted (speech models generate); every other attribute is the engine's, read on each
    access. The salt is read when the prompt is submitted, within the call (a stream's engine requests are
    submitted before its stream is handed back).
    """

    def __init__(self, engine: EngineClient) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, prompt: Any, sampling_params: Any, request_id: str, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """`EngineClient.generate`, the prompt salted with the call's salt (unchanged without one)."""
        salt = _CALL_SALT.get()
        return self._engine.generate(
            _salted(prompt, salt) if salt is not None else prompt, sampling_params, request_id, **kwargs
        )


#: Validates a transcription / translation form (``parse_request`` adds ``model`` and ``request_id``).
VALIDATE_TRANSCRIPTION: Final = _validator(TranscriptionRequest)
VALIDATE_TRANSLATION: Final = _validator(TranslationRequest)


class SpeechOperations:
    """vLLM's transcription and translation objects for one speech model, created as `vllm serve` creates them."""

    def __init__(
        self,
        engine: EngineClient,
        models: OpenAIServingModels,
        *,
        logger: RequestLogger | None,
        enable_force_include_usage: bool,
    ) -> None:
        common: dict[str, Any] = {
            "request_logger": logger,
            "enable_force_include_usage": enable_force_include_usage,
        }
        salting = cast(EngineClient, _SaltingEngine(engine))
        self._transcription = OpenAIServingTranscription(salting, models, **common)
        self._translation = OpenAIServingTranslation(salting, models, **common)

    @classmethod
    def for_tasks(
        cls,
        tasks: tuple[SupportedTask, ...],
        engine: EngineClient,
        models: OpenAIServingModels,
        *,
        logger: RequestLogger | None,
        enable_force_include_usage: bool,
    ) -> SpeechOperations | None:
        """The speech objects when the model's tasks have `SPEECH_TASK` (vLLM registers the routes only then)."""
        if SPEECH_TASK not in tasks:
            return None
        return cls(engine, models, logger=logger, enable_force_include_usage=enable_force_include_usage)

    def transcribe(self, call: SpeechCall) -> Awaitable[Any]:
        """As vLLM's ``create_transcriptions`` route: a response model, an SSE generator or an `ErrorResponse`."""
        return self._run(call, self._transcription.create_transcription)

    def translate(self, call: SpeechCall) -> Awaitable[Any]:
        """As vLLM's ``create_translations`` route."""
        return self._run(call, self._translation.create_translation)

    @staticmethod
    async def _run(call: SpeechCall, create: Callable[..., Awaitable[Any]]) -> Any:
        # The size and salt checks raise VLLMValidationError (400), mapped by the caller as vLLM's handlers do.
        audio = await read_upload_with_limit(call.request.file)
        # An extra field of vLLM's request (its model keeps them), checked as vLLM checks its other requests' salts.
        salt = (call.request.model_extra or {}).get("cache_salt")
        check_cache_salt(salt)
        raw = _RawRequest(headers={"X-Request-Id": call.request_id})
        token = _CALL_SALT.set(salt)
        try:
            return await create(audio, call.request, raw)
        finally:
            _CALL_SALT.reset(token)
