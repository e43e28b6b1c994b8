"""Where ``turnout serve`` takes the API key from: a variable or a file, never the command line.

A command line is public on the machine: any local user reads it in ``ps`` or ``/proc/<pid>/cmdline``. So the
key is named, not given: ``--api-key-env NAME`` reads the variable ``NAME``, ``--api-key-file PATH`` reads the
file (its first line, stripped). vLLM's ``--api-key VALUE`` is refused with a message naming these
(``frontend_flags.REFUSED``). Without either, the profile's ``server.api_key_env`` variable (``TURNOUT_API_KEY``
by default) and then vLLM's ``VLLM_API_KEY`` give the key (``server/api/edge/key_ring.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import click

__all__ = ["API_KEY_ALTERNATIVES", "cli_api_key"]

logger = logging.getLogger("turnout.cli")

#: What to use instead of a key on the command line (one sentence, said wherever ``--api-key VALUE`` is refused).
API_KEY_ALTERNATIVES: Final = (
    "a key on the command line is visible to every local user (ps, /proc/*/cmdline): give --api-key-env NAME "
    "(the variable holding it) or --api-key-file PATH, or set VLLM_API_KEY or the profile's server.api_key_env "
    "variable (TURNOUT_API_KEY by default)"
)


def cli_api_key(env_name: str | None, file: str | None, environ: Mapping[str, str]) -> str | None:
    """The key ``--api-key-env`` or ``--api-key-file`` names (None when neither is given).

    Raises:
        click.UsageError: Both are given, the variable is unset or empty, or the file is unreadable or empty.
    """
    if env_name and file:
        raise click.UsageError("give --api-key-env or --api-key-file, not both")
    if env_name:
        value = environ.get(env_name, "").strip()
        if not value:
            raise click.UsageError(f"--api-key-env {env_name}: the variable {env_name} is not set or is empty")
        return value
    if file is None:
        return None
    try:
        text = Path(file).read_text(encoding="utf-8")
        mode = os.stat(file).st_mode
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise click.UsageError(f"--api-key-file {file}: cannot read it: {reason}") from None
    value = (text.splitlines() or [""])[0].strip()
    if not value:
        raise click.UsageError(f"--api-key-file {file}: the file is empty")
    if mode & 0o077:
        logger.warning("--api-key-file %s can be read by other users (mode %o): chmod 600 it", file, mode & 0o777)
    return value
