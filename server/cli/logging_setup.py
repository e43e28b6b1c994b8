"""``--log-format text|json``: the server's logging, and its engines', set up once, before vLLM is imported.

Turnout's records and uvicorn's go through :func:`server.profiles.logging_config`; vLLM reads the same set-up from
a file named by ``VLLM_LOGGING_CONFIG_PATH`` in each of its processes (Turnout's, when it imports vLLM, and every
engine process, spawned with a copy of this environment). The file lives in a private folder of this process,
removed at exit.
"""

from __future__ import annotations

import atexit
import logging
import logging.config
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import click

from server.profiles import (
    LOG_FORMATS,
    VLLM_CONFIGURE_LOGGING_ENV,
    VLLM_LOGGING_CONFIG_PATH_ENV,
    LogFormat,
    logging_config,
    write_vllm_logging_config,
)

__all__ = ["LOG_FORMAT_OPTION", "LoggingSetup", "set_up_logging"]

logger = logging.getLogger("turnout.cli")

#: The option ``turnout serve`` and ``turnout demo`` share.
LOG_FORMAT_OPTION = click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(LOG_FORMATS),
    help="Log lines of the server, uvicorn and the vLLM engines: one text format, or JSON lines (time, level, "
    "logger, message, pid, and model and request_id when known).",
)


class LoggingSetup:
    """The chosen format, and how the CLI's own start-up messages reach the user in it."""

    def __init__(self, log_format: LogFormat, level: str, folder: Path | None) -> None:
        self.log_format, self.level, self.folder = log_format, level, folder

    @property
    def json(self) -> bool:
        """Whether every line must be a JSON line (then the CLI's messages are log records, not console text)."""
        return self.log_format == "json"

    def uvicorn_config(self) -> dict[str, Any]:
        """uvicorn's ``log_config``: the same format for its lines."""
        return logging_config(self.log_format, self.level)

    def remove(self) -> None:
        """Remove the private folder of vLLM's set-up file (at exit; again is harmless)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def loading_status(self, console_status: Callable[[str], AbstractContextManager[None]]) -> Any:
        """The API's loading status: the console's spinner in text, two log records in JSON."""
        if not self.json:
            return console_status

        @contextmanager
        def logged(model: str) -> Iterator[None]:
            logger.info("loading %s", model)
            yield
            logger.info("%s is active", model)

        return logged


def set_up_logging(log_format: LogFormat, level: str, env: MutableMapping[str, str] = os.environ) -> LoggingSetup:
    """Configure this process's logging and write vLLM's set-up for ``env`` (before vLLM is imported).

    A vLLM logging set-up the user chose (``VLLM_LOGGING_CONFIG_PATH`` set, or ``VLLM_CONFIGURE_LOGGING=0``) is kept.
    """
    logging.config.dictConfig(logging_config(log_format, level))
    if env.get(VLLM_LOGGING_CONFIG_PATH_ENV) or env.get(VLLM_CONFIGURE_LOGGING_ENV) == "0":
        return LoggingSetup(log_format, level, None)
    folder = Path(tempfile.mkdtemp(prefix="turnout-logging-"))  # 0700: this process's own
    setup = LoggingSetup(log_format, level, folder)
    atexit.register(setup.remove)
    env.update(write_vllm_logging_config(log_format, level, folder))
    return setup
