"""A bundle over a real tiny Whisper engine: the speech routes' engine requests are the bundle's to abort.

A switch ends a running request through ``bundle.abort(request_id)``, which aborts the engine requests the bundle
recorded for it; this pins that a transcription stream's request (vLLM derives ``transcribe-<our id>`` from the
``X-Request-Id`` the bundle hands vLLM) is among them. The routes' answers are ``tests/api/test_live_speech.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from server.frontend import FrontendBundle, FrontendSettings, StreamResult, build_bundle
from server.frontend.operations import AudioUpload
from server.tinymodels.speech import WHISPER_ANSWER_TOKEN, build_tiny_whisper
from tests.audio import sine_wav
from tests.frontend.tiny import engine_cache_salts, running_engine_ids, start_engine

pytestmark = pytest.mark.engine

SPEECH_MODEL = "tiny-whisper"


@pytest.fixture(scope="module")
async def whisper_engine() -> AsyncIterator[Any]:
    engine = start_engine(build_tiny_whisper(), SPEECH_MODEL, dtype="float32", max_model_len=448)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
async def speech(whisper_engine: Any) -> FrontendBundle:
    return await build_bundle(SPEECH_MODEL, whisper_engine, FrontendSettings())


def _form(**fields: Any) -> dict[str, Any]:
    return {"file": AudioUpload(sine_wav(), "tone.wav", "audio/wav"), "language": "en", "temperature": 0, **fields}


async def test_a_transcription_stream_is_aborted_through_the_bundle(
    whisper_engine: Any, speech: FrontendBundle
) -> None:
    request_id = uuid.uuid4().hex
    result = await speech.call("audio.transcriptions", _form(stream=True, max_completion_tokens=400), request_id)
    assert isinstance(result, StreamResult)
    chunks: list[str] = []
    async for chunk in result.chunks:
        chunks.append(chunk)
        if len(chunks) == 2:
            assert running_engine_ids(whisper_engine, request_id) == (f"transcribe-{request_id}",)
            assert await speech.abort(request_id) == (f"transcribe-{request_id}",)
    assert len(chunks) < 40 and chunks[-1] == "data: [DONE]\n\n"  # 400 tokens would be 400 chunks
    last = json.loads(chunks[-2].removeprefix("data: "))
    assert last["choices"][0]["finish_reason"] == "abort"
    assert running_engine_ids(whisper_engine, request_id) == ()


async def test_a_translation_answers_and_a_bad_upload_is_vllms_400(speech: FrontendBundle) -> None:
    answer = await speech.call("audio.translations", _form(max_completion_tokens=3), uuid.uuid4().hex)
    assert answer.status_code == 200 and answer.payload == {"text": WHISPER_ANSWER_TOKEN * 3}  # type: ignore[union-attr]
    broken = await speech.call("audio.transcriptions", _form(file=AudioUpload(b"no audio")), uuid.uuid4().hex)
    assert broken.status_code == 400 and "Traceback" not in json.dumps(broken.payload)  # type: ignore[union-attr]


async def test_the_speech_routes_carry_the_forms_cache_salt_to_the_engine(
    whisper_engine: Any, speech: FrontendBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's speech requests take no ``cache_salt``: the frontend puts the form's (the key's group salt, added by
    the API layer) on every engine prompt, Whisper's language detection's too."""
    salts = engine_cache_salts(whisper_engine, monkeypatch)
    form = _form(max_completion_tokens=2, cache_salt="group-salt")
    for operation in ("audio.transcriptions", "audio.translations"):
        answer = await speech.call(operation, form, uuid.uuid4().hex)
        assert answer.status_code == 200, answer.payload  # type: ignore[union-attr]
    detected = await speech.call("audio.transcriptions", {**form, "language": None}, uuid.uuid4().hex)
    assert detected.status_code == 200, detected.payload  # type: ignore[union-attr]
    streamed = await speech.call("audio.transcriptions", {**form, "stream": True}, uuid.uuid4().hex)
    assert isinstance(streamed, StreamResult)
    assert [chunk async for chunk in streamed.chunks][-1] == "data: [DONE]\n\n"
    assert salts == ["group-salt"] * 5  # two answers, a detection and its answer, a stream
    unsalted = await speech.call("audio.transcriptions", _form(max_completion_tokens=2), uuid.uuid4().hex)
    assert unsalted.status_code == 200 and salts[-1] is None  # type: ignore[union-attr]
