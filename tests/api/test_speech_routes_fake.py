"""vLLM's speech routes (``/v1/audio/transcriptions``, ``/translations``) through the API, on fake bundles.

The multipart form as the bundle gets it, admission and auto-mode queueing, the 404 of a model without the
route, OpenAI-shaped errors, the upload limit and a stream's end on a switch. The real bundle's side (vLLM's
transcription objects on a tiny Whisper engine) is ``test_live_speech.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import msgspec
import pytest

from server.api.edge.forms import FORM_FIELDS_ALLOWANCE, audio_upload_limit_bytes
from server.engine.strategies import StopStrategy
from server.profiles.schema import ModelProfile, Switching
from tests.api.conftest import MakeClient, admin
from tests.fakes.engines import FakeLoader
from tests.waiting import until

MODELS = {
    "speech": ModelProfile(model="/m/tiny-whisper"),
    "tools": ModelProfile(model="/m/tools"),
}
WAV = b"RIFF....WAVEfmt fake audio bytes"
TRANSCRIBE = "/v1/audio/transcriptions"


def _form(**fields: Any) -> dict[str, Any]:
    return {"data": {"model": "speech", **fields}, "files": {"file": ("clip.wav", WAV, "audio/wav")}}


def _data_events(text: str) -> list[Any]:
    events = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    return [event if event == "[DONE]" else msgspec.json.decode(event) for event in events]


async def _speech_client(make_client: MakeClient, **settings: Any) -> httpx.AsyncClient:
    client, manager = await make_client(models=MODELS, **settings)
    await client.post("/v1/models/switch", json={"model": "speech"}, headers=admin())
    assert manager.active_model == "speech"
    return client  # type: ignore[no-any-return]


async def test_the_form_reaches_the_bundle_with_its_file_and_fields(make_client: MakeClient) -> None:
    client = await _speech_client(make_client)
    for route in (TRANSCRIBE, "/v1/audio/translations"):
        answer = await client.post(route, **_form(language="en", temperature="0", max_completion_tokens="2"))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["model"] == "speech" and len(body["text"].split()) == 2
        heard = body["heard"]
        assert heard["filename"] == "clip.wav" and heard["size"] == len(WAV)
        assert heard["fields"] == ["file", "language", "max_completion_tokens", "model", "temperature"]


async def test_a_field_sent_twice_is_a_list_and_stream_a_boolean(make_client: MakeClient) -> None:
    client = await _speech_client(make_client)
    fields = {"timestamp_granularities[]": ["word", "segment"], "stream": "False"}
    answer = await client.post(TRANSCRIBE, **_form(**fields))
    assert answer.status_code == 200, answer.text
    heard = answer.json()["heard"]
    assert heard["granularities"] == ["word", "segment"] and heard["stream"] is False


async def test_a_model_without_the_speech_task_is_a_404_naming_it(make_client: MakeClient) -> None:
    client = await _speech_client(make_client)
    await client.post("/v1/models/switch", json={"model": "tools"}, headers=admin())
    answer = await client.post(TRANSCRIBE, data={"model": "tools"}, files={"file": ("a.wav", WAV)})
    assert answer.status_code == 404 and "'tools'" in answer.json()["error"]["message"]


async def test_bad_bodies_are_openai_errors(make_client: MakeClient) -> None:
    client = await _speech_client(make_client)
    as_json = await client.post(TRANSCRIBE, json={"model": "speech"})
    assert as_json.status_code == 415 and "multipart/form-data" in as_json.json()["error"]["message"]
    no_file = await client.post(TRANSCRIBE, data={"model": "speech"}, files={"other": ("a.txt", b"x")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    unknown = await client.post(TRANSCRIBE, **{**_form(), "data": {"model": "nope"}})
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
    assert "Traceback" not in unknown.text + no_file.text + as_json.text


async def test_a_body_over_vllms_upload_limit_is_refused_while_it_is_read(make_client: MakeClient) -> None:
    client = await _speech_client(make_client)
    too_big = b"\0" * (audio_upload_limit_bytes() + FORM_FIELDS_ALLOWANCE + 1)
    answer = await client.post(TRANSCRIBE, data={"model": "speech"}, files={"file": ("big.wav", too_big)})
    assert answer.status_code == 413, answer.text
    assert set(answer.json()["error"]) >= {"message", "type", "code"}


async def test_auto_mode_queues_a_speech_request_for_its_model(make_client: MakeClient) -> None:
    client, manager = await make_client(models=MODELS, switching=Switching(mode="auto"))
    assert manager.active_model == "tools"
    answer = await client.post(TRANSCRIBE, **_form())
    assert answer.status_code == 200 and answer.json()["model"] == "speech"
    assert manager.active_model == "speech"


async def test_a_stream_ends_with_done_or_with_the_switch_error(make_client: MakeClient) -> None:
    client = await _speech_client(make_client)
    whole = await client.post(TRANSCRIBE, **_form(stream="true", max_completion_tokens="3"))
    events = _data_events(whole.text)
    assert whole.headers["content-type"].startswith("text/event-stream")
    assert len(events) == 4 and events[-1] == "[DONE]" and all(e["model"] == "speech" for e in events[:-1])

    stream = asyncio.create_task(
        client.post(TRANSCRIBE, **_form(stream="true", max_completion_tokens="500", step_s="0.01"))
    )
    await asyncio.sleep(0.05)
    await client.post("/v1/models/switch", json={"model": "tools", "drain_timeout": 0.05}, headers=admin())
    events = _data_events((await stream).text)
    error = next(event for event in events if isinstance(event, dict) and "error" in event)
    assert error["error"]["code"] == "model_switched"
    assert events[-1] == "[DONE]" and len(events) < 500


async def test_a_stream_that_waits_for_its_model_gets_comments_then_its_chunks(make_client: MakeClient) -> None:
    client, manager = await make_client(models=MODELS, strategy=StopStrategy, loader=FakeLoader(delay_s=1.0))
    switch = asyncio.create_task(client.post("/v1/models/switch", json={"model": "speech"}, headers=admin()))
    await until(lambda: manager.switching_to == "speech")  # its engine is loading: the stream waits for it
    answer = await client.post(TRANSCRIBE, **_form(stream="true"))
    assert (await switch).status_code == 200
    assert answer.text.startswith(": waiting for 'speech' to load")
    assert _data_events(answer.text)[-1] == "[DONE]"


def test_the_upload_limit_is_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.envs

    monkeypatch.delenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", raising=False)
    assert audio_upload_limit_bytes() == vllm.envs.VLLM_MAX_AUDIO_CLIP_FILESIZE_MB * (1 << 20)
    monkeypatch.setenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "3")
    assert audio_upload_limit_bytes() == vllm.envs.VLLM_MAX_AUDIO_CLIP_FILESIZE_MB * (1 << 20) == 3 << 20
