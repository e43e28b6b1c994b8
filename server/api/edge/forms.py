"""Multipart request bodies: the speech routes' forms (``/v1/audio/transcriptions`` and ``/translations``).

vLLM's two speech routes take ``Form`` fields and an ``UploadFile`` ``file`` (FastAPI's form model), not JSON.
:func:`read_form_object` reads such a form with Litestar's own multipart parser into the dict a bundle takes:
each field a string, a field sent more than once (``timestamp_granularities[]``) a list, an uploaded file an
`AudioUpload`; vLLM's request model then validates and coerces the strings as FastAPI's form model does.

The body is limited to vLLM's audio upload limit (``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``, 25 MB by default) plus
:data:`FORM_FIELDS_ALLOWANCE`: Litestar answers a larger body 413 while it reads it, so an oversized upload never
fills memory; a file within that allowance over the limit reaches vLLM's own check, which answers 400
"Maximum file size exceeded" as `vllm serve` does.
"""

from __future__ import annotations

import os
from typing import Any, Final

from litestar import Request
from litestar.datastructures import UploadFile
from litestar.exceptions import ValidationException

from server.frontend import AudioUpload

__all__ = [
    "FORM_BODY",
    "FORM_FIELDS_ALLOWANCE",
    "FORM_TASK",
    "audio_upload_limit_bytes",
    "form_body_limit",
    "read_form_object",
]

#: A route handler's ``opt`` key that makes the admission dependency read a multipart form, not JSON; its value is
#: the name of the route's API in the 404 of a model that cannot serve it (``Transcriptions``).
FORM_BODY: Final = "turnout_form_body"
#: The vLLM task a form route's model must have: a form is a body any web page may post without a preflight, so
#: a model that cannot serve it is refused before admission, which could otherwise switch the device to it.
FORM_TASK: Final = "transcription"
#: Room for the form's other fields and its multipart framing on top of the file's limit.
FORM_FIELDS_ALLOWANCE: Final = 1 << 20
#: vLLM's variable and default (``vllm.envs.VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``; a test holds them equal).
_LIMIT_ENV: Final = "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB"
_LIMIT_DEFAULT_MB: Final = 25
#: How pydantic reads a boolean form field (lax mode): what the admission must know of ``stream`` before vLLM.
_TRUE: Final = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE: Final = frozenset({"0", "off", "f", "false", "n", "no"})


def audio_upload_limit_bytes() -> int:
    """vLLM's limit on an uploaded audio file, in bytes (read when the app is built, as vLLM reads it)."""
    return int(os.environ.get(_LIMIT_ENV, _LIMIT_DEFAULT_MB)) * (1 << 20)  # an integer, as vLLM parses it


async def read_form_object(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """The multipart (or URL-encoded) form as a bundle's body; a 400 (never a 500) for anything else.

    ``stream`` becomes a boolean when pydantic would read it as one, so that admission knows a stream before
    vLLM does (a streaming request that waits for its model gets its headers and waiting comments).
    """
    media_type, _ = request.content_type
    if media_type not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise ValidationException("The request body must be multipart/form-data, with the audio as its 'file'.")
    fields: dict[str, Any] = {}
    for key, value in (await request.form()).multi_items():
        item = (
            AudioUpload(await value.read(), value.filename, value.content_type)
            if isinstance(value, UploadFile)
            else value
        )
        if key in fields:
            previous = fields[key]
            fields[key] = [*previous, item] if isinstance(previous, list) else [previous, item]
        else:
            fields[key] = item
    stream = fields.get("stream")
    if isinstance(stream, str) and stream.strip().lower() in _TRUE | _FALSE:
        fields["stream"] = stream.strip().lower() in _TRUE
    return fields


def form_body_limit() -> int:
    """The speech routes' ``request_max_body_size``: the upload limit plus :data:`FORM_FIELDS_ALLOWANCE`."""
    return audio_upload_limit_bytes() + FORM_FIELDS_ALLOWANCE
