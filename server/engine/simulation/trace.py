"""A recorded trace of requests, as ``turnout simulate --trace`` reads it.

CSV with the header ``timestamp,model,prompt_tokens,output_tokens``, or JSON lines with those keys. A timestamp is
seconds from the start or an ISO 8601 time (then counted from the first request's). The requests come back in the
order they arrived.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import msgspec

__all__ = ["TRACE_FIELDS", "TraceInvalid", "TraceRequest", "parse_trace", "read_trace"]

TRACE_FIELDS: Final = ("timestamp", "model", "prompt_tokens", "output_tokens")


class TraceInvalid(ValueError):
    """The trace cannot be read: the message names the line and what is wrong."""


class TraceRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded request.

    Attributes:
        at: Seconds from the trace's start.
        model: The model it asked for.
        prompt_tokens: Its prompt's tokens.
        output_tokens: The tokens it generated.
    """

    at: float
    model: str
    prompt_tokens: int
    output_tokens: int


def read_trace(path: Path) -> list[TraceRequest]:
    """The requests of the trace file ``path`` (CSV or JSON lines, told apart by the first character)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceInvalid(f"{path}: cannot be read ({exc})") from None
    return parse_trace(text, name=str(path))


def parse_trace(text: str, *, name: str = "trace") -> list[TraceRequest]:
    """The requests of a trace's text."""
    if text.lstrip().startswith("{"):
        rows: Iterable[tuple[int, Mapping[str, Any]]] = _json_lines(text, name)
    else:
        reader = csv.DictReader(io.StringIO(text))
        if tuple(reader.fieldnames or ()) != TRACE_FIELDS:
            raise TraceInvalid(f"{name}:1: the header must be {','.join(TRACE_FIELDS)}")
        rows = ((number, row) for number, row in enumerate(reader, start=2))
    raw = [_request(row, f"{name}:{number}") for number, row in rows]
    if not raw:
        raise TraceInvalid(f"{name}: no requests")
    start = min(at for at, *_ in raw)
    requests = [TraceRequest(at=at - start, model=m, prompt_tokens=p, output_tokens=o) for at, m, p, o in raw]
    return sorted(requests, key=lambda item: item.at)


def _json_lines(text: str, name: str) -> Iterable[tuple[int, Mapping[str, Any]]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise TraceInvalid(f"{name}:{number}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise TraceInvalid(f"{name}:{number}: not an object")
        yield number, row


def _request(row: Mapping[str, Any], where: str) -> tuple[float, str, int, int]:
    missing = [key for key in TRACE_FIELDS if row.get(key) in (None, "")]
    if missing:
        raise TraceInvalid(f"{where}: {', '.join(missing)} missing")
    try:
        tokens = int(row["prompt_tokens"]), int(row["output_tokens"])
    except (TypeError, ValueError):
        raise TraceInvalid(f"{where}: prompt_tokens and output_tokens must be whole numbers") from None
    if min(tokens) < 0:
        raise TraceInvalid(f"{where}: token counts cannot be negative")
    return _seconds(row["timestamp"], where), str(row["model"]), *tokens


def _seconds(value: Any, where: str) -> float:
    """Seconds from a number, or from an ISO 8601 time (its epoch seconds; the caller counts from the first)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        pass
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        raise TraceInvalid(f"{where}: timestamp {value!r} is neither seconds nor an ISO 8601 time") from None
