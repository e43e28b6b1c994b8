"""End to end: vLLM's speech routes through ``turnout serve`` on a real tiny Whisper engine (vLLM's CPU backend).

One server, one engine (module-scoped). The tiny Whisper (``server/tinymodels/speech``) answers any audio with
:data:`WHISPER_ANSWER_TOKEN` repeated, so greedy answers are exact: ``max_completion_tokens`` of them. The audio
is a generated sine tone written with the stdlib ``wave`` module at 8 kHz, so vLLM resamples it to Whisper's
16 kHz (with PyAV: the setup removes torchaudio), as it would a phone recording.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import httpx
import openai
import pytest

from server.tinymodels.speech import WHISPER_ANSWER_TOKEN, build_tiny_whisper
from tests.api.live_server import LiveServer, serving
from tests.audio import sine_wav

pytestmark = pytest.mark.engine

#: vLLM's upload limit for this server (VLLM_MAX_AUDIO_CLIP_FILESIZE_MB), small so the oversize test is cheap.
LIMIT_MB = 1
TOKENS = 5
PROFILE = """\
default_model: speech
models:
  speech:
    model: {model}
    dtype: float32
    max_model_len: 448
    max_num_seqs: 4
    kv_cache_memory_bytes: 16777216
    enforce_eager: true
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("speech")
    profile = folder / "speech.yaml"
    profile.write_text(PROFILE.format(model=build_tiny_whisper()), encoding="utf-8")
    with serving(profile, folder / "speech.log", {"VLLM_MAX_AUDIO_CLIP_FILESIZE_MB": str(LIMIT_MB)}) as live:
        yield live


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120) as openai_client:
        yield openai_client


def test_transcription_and_translation_with_the_openai_client(client: openai.OpenAI) -> None:
    audio = ("tone.wav", sine_wav(), "audio/wav")
    greedy = {"max_completion_tokens": TOKENS}
    heard = client.audio.transcriptions.create(
        model="speech", file=audio, language="en", temperature=0, extra_body=greedy
    )
    assert heard.text == WHISPER_ANSWER_TOKEN * TOKENS
    with warnings.catch_warnings():
        # The openai client marks translations deprecated (OpenAI's newer models lack them); vLLM serves them.
        warnings.simplefilter("ignore", DeprecationWarning)
        translated = client.audio.translations.create(model="speech", file=audio, temperature=0, extra_body=greedy)
    assert translated.text == WHISPER_ANSWER_TOKEN * TOKENS


def test_a_streamed_transcription_is_vllms_chunks_then_done(server: LiveServer) -> None:
    form = {"model": "speech", "language": "en", "temperature": "0", "stream": "true"}
    form["max_completion_tokens"] = str(TOKENS)
    files = {"file": ("tone.wav", sine_wav(), "audio/wav")}
    with httpx.stream("POST", f"{server.url}/v1/audio/transcriptions", data=form, files=files, timeout=120) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"transcription.chunk"}
    assert "".join(chunk["choices"][0]["delta"]["content"] for chunk in chunks) == WHISPER_ANSWER_TOKEN * TOKENS
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_errors_are_vllms_in_openais_shape(server: LiveServer, client: openai.OpenAI) -> None:
    # Just over vLLM's limit: Litestar lets it in (the limit has room for the other fields), vLLM refuses it.
    oversized = ("big.wav", b"\0" * (LIMIT_MB * (1 << 20) + 1024), "audio/wav")
    with pytest.raises(openai.BadRequestError, match="Maximum file size exceeded"):
        client.audio.transcriptions.create(model="speech", file=oversized)
    with pytest.raises(openai.BadRequestError, match=r"[Ii]nvalid"):
        client.audio.transcriptions.create(model="speech", file=("noise.wav", b"not audio at all", "audio/wav"))
    # The model serves the speech routes, not the classification ones: a 404 naming it.
    refused = httpx.post(f"{server.url}/classify", json={"model": "speech", "input": "hi"}, timeout=30)
    assert refused.status_code == 404 and "'speech'" in refused.json()["error"]["message"]


def test_the_openapi_document_has_the_forms(server: LiveServer) -> None:
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    body = document["paths"]["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]
    assert list(body) == ["multipart/form-data"]
    schema = document["components"]["schemas"]["TranscriptionRequest"]
    assert "file" in schema["required"] and "language" in schema["properties"]
