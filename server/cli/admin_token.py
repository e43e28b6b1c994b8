"""The admin token ``turnout demo`` (and ``turnout serve`` when asked) generates: kept in a file, never printed.

A token printed at start ends up wherever the server's output goes: a terminal's scrollback, a log collector (with
``--log-format json`` too), a CI log. So the generated token is written to the private state folder
(``server.engine.StateDir``: ``$XDG_STATE_HOME/turnout``, else ``~/.local/state/turnout``; the file mode 0600) and
only its path is printed. ``turnout switch``, ``status`` and the other admin clients read it there when neither
the token's variable nor its ``_FILE`` variable is set (:func:`admin_token`), only while the file is private.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

import click

from server.api import FILE_SUFFIX, SecretSourceInvalid, check_secret_sources, secret_env
from server.cli._output import err_console, out_console
from server.engine import StateDir, state_dir, state_home

__all__ = ["ADMIN_TOKEN_FILE", "admin_token", "keep_generated_token", "open_state_folder"]

logger = logging.getLogger("turnout.cli")

#: The generated admin token's file in the state folder (the last server that generated one wrote it).
ADMIN_TOKEN_FILE: Final = "admin-token"


def open_state_folder() -> StateDir:
    """The state folder, created or checked; exits 1 when it is refused (another user's, open to others, a link)."""
    try:
        return state_dir()
    except OSError as exc:
        err_console.print(f"error: cannot keep the generated admin token: {exc}; not starting.", markup=False)
        raise SystemExit(1) from None


def keep_generated_token(token: str, token_env: str, *, as_log: bool) -> Path:
    """Write the generated ``token`` to the state folder and say where (the path, never the token); exits 1
    when the state folder is refused (:func:`open_state_folder`)."""
    try:
        path = open_state_folder().write_private(ADMIN_TOKEN_FILE, token + "\n")
    except OSError as exc:
        err_console.print(f"error: cannot keep the generated admin token: {exc}; not starting.", markup=False)
        raise SystemExit(1) from None
    lines = (
        f"Admin token generated into {path} (mode 0600; turnout switch and turnout status read it there)",
        f"  other clients: export {token_env}{FILE_SUFFIX}={path}   or   export {token_env}=$(cat {path})",
    )
    if as_log:
        logger.info("%s", "\n".join(lines))
    else:
        for line in lines:
            out_console.print(line, markup=False, soft_wrap=True)
    return path


def admin_token(token_env: str) -> str | None:
    """The admin token a client sends: ``token_env``'s value, else its ``_FILE``'s file, else the token a server
    generated into the state folder (only while the folder and the file are this user's private ones).

    Exits 1 when ``token_env`` and its ``_FILE`` are both set, or the file cannot be read.
    """
    try:
        check_secret_sources([token_env])
    except SecretSourceInvalid as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    token = secret_env().get(token_env, "").strip()
    return token or _stored_token()


def _stored_token() -> str | None:
    """The generated token in the state folder; None when there is none, or when the folder or the file is not
    private (said on stderr: a token someone else could have planted or read is not sent)."""
    if not state_home().is_dir():  # a client never creates the folder
        return None
    try:
        text = StateDir().read_private(ADMIN_TOKEN_FILE)
    except OSError as exc:
        err_console.print(f"warning: the generated admin token is not used: {exc}", markup=False)
        return None
    return (text or "").strip() or None
