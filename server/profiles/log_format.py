"""One log format for Turnout, uvicorn and the vLLM engines: ``--log-format text|json``.

The standard library's logging only: one ``dictConfig`` (:func:`logging_config`) serves Turnout's process, uvicorn
(its ``log_config``) and, written to a file (:func:`write_vllm_logging_config`), vLLM, which reads it from
``VLLM_LOGGING_CONFIG_PATH`` in every process it starts. Here, at the lowest layer, because vLLM's processes import
this module by name from that file and need nothing else of Turnout's for it.

JSON lines carry ``time``, ``level``, ``logger``, ``message``, ``pid``, and when known ``process`` (vLLM's name for
its process, ``EngineCore`` ...: the ``(EngineCore pid=...)`` prefix of its text lines, as two fields), ``model``
(an engine process's served model, from :data:`LOG_MODEL_ENV` in its environment) and ``request_id`` (the HTTP
request being served, from :data:`REQUEST_ID`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "LOG_FORMATS",
    "LOG_MODEL_ENV",
    "REQUEST_ID",
    "TEXT_FORMAT",
    "VLLM_CONFIGURE_LOGGING_ENV",
    "VLLM_LOGGING_CONFIG_PATH_ENV",
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "describe_start",
    "logging_config",
    "write_vllm_logging_config",
]

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
#: The variable an engine process finds its served model's name in (set around its spawn).
LOG_MODEL_ENV = "TURNOUT_LOG_MODEL"
#: The HTTP request a record was logged for (set by the API for each request).
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("turnout_request_id", default=None)
#: The one text format: time, level, pid, logger, message.
TEXT_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
#: vLLM's switch for its own logging set-up (``0``: vLLM leaves logging alone) and the file it reads the set-up
#: from, in each of its processes (``vllm/logger.py``).
VLLM_CONFIGURE_LOGGING_ENV = "VLLM_CONFIGURE_LOGGING"
VLLM_LOGGING_CONFIG_PATH_ENV = "VLLM_LOGGING_CONFIG_PATH"


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT`, with every line of a record under the record's own header (a traceback's lines too, as
    vLLM's own formatter does): a line found by a search says whose it is."""

    def __init__(self, *args: Any, use_colors: bool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # use_colors: what uvicorn sets on its formatters; no colours here

    def format(self, record: logging.LogRecord) -> str:
        """``record`` in the text format, its header repeated on each line."""
        text = super().format(record)
        head = text.partition(record.message)[0] if record.message else ""
        return text.replace("\n", "\n" + head) if head else text


def describe_start(total_ms: int, phases_ms: dict[str, int]) -> str:
    """An engine start in words: ``3.4 s: config 10 ms, launch 200 ms, ...`` (the server's log line and
    ``turnout status`` both say it so)."""
    phases = ", ".join(f"{name.replace('_', ' ')} {ms} ms" for name, ms in phases_ms.items())
    return f"{total_ms / 1000.0:.1f} s: {phases}" if phases else f"{total_ms / 1000.0:.1f} s"


class JsonFormatter(logging.Formatter):
    """One JSON object a line (``json.dumps`` escapes a message's newlines)."""

    def __init__(self, *args: Any, use_colors: bool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # use_colors: what uvicorn sets on its formatters; JSON has none
        # Read once, when the process sets up its logging: only engine processes are spawned with it (Turnout's own
        # process has it set just around a spawn, which its records must not pick up).
        self._model = os.environ.get(LOG_MODEL_ENV)

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as a JSON line."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        process = getattr(record, "vllm_process_name", None)  # vLLM's record factory adds it
        if process:
            line["process"] = process
        if self._model:
            line["model"] = self._model
        request_id = REQUEST_ID.get()
        if request_id:
            line["request_id"] = request_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def logging_config(log_format: LogFormat, level: str = "INFO") -> dict[str, Any]:
    """The ``dictConfig`` for ``log_format``: every record to stderr, Turnout's, uvicorn's and vLLM's alike."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"}
        if log_format == "json"
        else {"()": f"{__name__}.TextFormatter", "format": TEXT_FORMAT, "datefmt": _DATE_FORMAT}
    )
    own = {"handlers": ["turnout"], "level": level.upper(), "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        # uvicorn sets use_colors on the formatters named default and access when it is given a choice.
        "formatters": {"default": formatter, "access": dict(formatter)},
        "handlers": {
            "turnout": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}
        },
        "root": {"handlers": ["turnout"], "level": level.upper()},
        # Loggers that would otherwise keep a handler of their own (vLLM's, uvicorn's) print through this one.
        "loggers": {name: dict(own) for name in ("vllm", "uvicorn", "uvicorn.error", "uvicorn.access")},
    }


def write_vllm_logging_config(log_format: LogFormat, level: str, folder: Path) -> dict[str, str]:
    """Write vLLM's logging set-up for ``log_format`` into ``folder``; the variables that make vLLM read it."""
    path = folder / f"vllm-logging-{log_format}.json"
    path.write_text(json.dumps(logging_config(log_format, level), indent=1), encoding="utf-8")
    return {VLLM_CONFIGURE_LOGGING_ENV: "1", VLLM_LOGGING_CONFIG_PATH_ENV: str(path)}
