"""Turnout's secrets leave the process environment once read, so that no process it starts inherits them.

vLLM starts each engine's core process with multiprocessing's ``spawn``, which hands the child a copy of
``os.environ`` as it is at that moment, and the core starts its workers the same way; so does every other child
(a kernel compiler, Ray's workers). A secret left in ``os.environ`` is therefore in every engine process's
``/proc/<pid>/environ``, and in whatever those processes run or dump. So, once the server has read them, the
variables that hold its secrets are moved out of ``os.environ`` into this module's private mapping: the profile's
``server.admin_token_env``, ``server.api_key_env``, ``server.metrics_token_env``, each
``server.api_keys[*].key_env``, vLLM's ``VLLM_API_KEY``, and the variable ``--api-key-env`` names.

Everything that reads a secret reads :func:`secret_env` (the withheld values, then ``os.environ``), so a reload
that reads the keys again still finds them: a running process's environment never changes from outside, so the
values kept are exactly what ``os.environ`` would have held. A reload that names a new key variable withholds it
too (an engine started before that reload inherited it; one started after does not).

Why once, rather than around each spawn: Turnout does not make every spawn itself (vLLM's core spawns its
workers, vLLM-Gaudi's host its core), and changing ``os.environ`` around a spawn races the threads that read it.
Moved out before the first engine starts, no later child of this process can get them.

Every secret may come from a file instead (Docker's convention): ``VAR_FILE`` names a file holding ``VAR``'s value
(one trailing newline stripped). Only a file keeps the secret out of the server's own ``/proc/<pid>/environ``: the
environment a process started with stays in that file whatever ``os.environ`` becomes, so a secret the user
exported is still there (readable by this user's other processes and by root), while ``VAR_FILE`` puts only a
path there. :func:`secret_env` reads the file when ``VAR`` is not set (each read: a rotated file applies at the
next reload); :func:`check_secret_sources` refuses a start where both are set, or the file cannot be read, and
warns of a file that others may read. ``turnout ray-serve`` hands its replicas the secrets as files in the
private state folder (:func:`secrets_as_files`), never as values in their environment.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Final

from server.api.edge.key_ring import VLLM_API_KEY_ENV
from server.engine import StateDir
from server.profiles import Profile

__all__ = [
    "FILE_SUFFIX",
    "SecretSourceInvalid",
    "check_secret_sources",
    "read_secret_file",
    "secret_env",
    "secret_names",
    "secrets_as_files",
    "withhold_secrets",
]

logger = logging.getLogger("turnout.api")

#: ``VAR`` + this names the variable holding the path of a file with ``VAR``'s value (Docker's convention).
FILE_SUFFIX: Final = "_FILE"

#: The secrets moved out of ``os.environ``, by variable name (this process only; never inherited).
_withheld: Final[dict[str, str]] = {}
#: The secret files already warned of as readable by others (one warning a file, however often it is read).
_warned: Final[set[str]] = set()


class SecretSourceInvalid(ValueError):
    """A secret is given twice (``VAR`` and ``VAR_FILE``) or its file cannot be read: the server must not start.

    The message names the variables and the file, never a value.
    """


def read_secret_file(path: str | Path) -> str:
    """The secret in the file ``path``: its text, one trailing newline stripped (as ``echo key > file`` wrote it).

    Raises:
        OSError, UnicodeDecodeError: It cannot be read as text.
    """
    with open(path, encoding="utf-8", newline="") as file:  # newline="": the file's own line ends, untranslated
        text = file.read()
    return text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")


class _SecretEnv(Mapping[str, str]):
    """The withheld variables, then ``os.environ`` (live), then, for a ``VAR`` set nowhere, ``VAR_FILE``'s file."""

    def __getitem__(self, name: str) -> str:
        if name in _withheld:
            return _withheld[name]
        if name in os.environ:
            return os.environ[name]
        path = None if name.endswith(FILE_SUFFIX) else os.environ.get(name + FILE_SUFFIX)
        if path:
            try:
                return read_secret_file(path)
            except (OSError, UnicodeDecodeError):
                pass  # check_secret_sources, run at every start, says why
        raise KeyError(name)

    def _names(self) -> set[str]:
        names = set(_withheld) | set(os.environ)
        return names | {name.removesuffix(FILE_SUFFIX) for name in os.environ if name.endswith(FILE_SUFFIX)}

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


_SECRET_ENV: Final = _SecretEnv()


def secret_env() -> Mapping[str, str]:
    """The environment to read secrets from: the withheld variables, then ``os.environ`` (live), then the file a
    ``VAR_FILE`` names for a ``VAR`` set nowhere."""
    return _SECRET_ENV


def check_secret_sources(names: Iterable[str | None]) -> None:
    """Refuse a secret given both as ``VAR`` and ``VAR_FILE``, or a ``VAR_FILE`` whose file cannot be read; warn
    (once a file) of a secret file that group or others may read.

    Raises:
        SecretSourceInvalid: The first such variable (its names and file, never its value).
    """
    for name in sorted({name for name in names if name}):
        path = os.environ.get(name + FILE_SUFFIX)
        if path is None:
            continue
        if name in os.environ or name in _withheld:
            raise SecretSourceInvalid(
                f"both {name} and {name}{FILE_SUFFIX} are set: give the secret one way ({name}{FILE_SUFFIX}, a file "
                f"holding it, keeps it out of the process environment)"
            )
        try:
            read_secret_file(path)
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise SecretSourceInvalid(f"{name}{FILE_SUFFIX}: cannot read the file {path}: {reason}") from None
        if mode & 0o077 and path not in _warned:
            _warned.add(path)
            logger.warning(
                "%s%s: the file %s can be read by other users (mode %o): chmod 600 it", name, FILE_SUFFIX, path, mode
            )


def secret_names(profile: Profile, extra: Iterable[str | None] = ()) -> frozenset[str]:
    """The variables that hold ``profile``'s secrets, vLLM's ``VLLM_API_KEY`` and the ``extra`` names given."""
    server = profile.server
    names = {server.admin_token_env, server.api_key_env, VLLM_API_KEY_ENV, *(item.key_env for item in server.api_keys)}
    names.update(name for name in (server.metrics_token_env, *extra) if name)
    return frozenset(names)


def withhold_secrets(profile: Profile, extra: Iterable[str | None] = ()) -> frozenset[str]:
    """Move the variables :func:`secret_names` lists out of ``os.environ`` (read them with :func:`secret_env`).

    Returns:
        The names that were in ``os.environ`` and are now withheld.

    Raises:
        SecretSourceInvalid: As :func:`check_secret_sources` (nothing is moved).
    """
    names = secret_names(profile, extra)
    check_secret_sources(names)
    moved = set()
    for name in names:
        value = os.environ.pop(name, None)
        if value is not None:
            _withheld[name] = value
            moved.add(name)
    return frozenset(moved)


def secrets_as_files(profile: Profile, folder: StateDir, extra: Iterable[str | None] = ()) -> dict[str, str]:
    """Hand the secrets of ``profile`` to other processes as files: each one set (as ``VAR`` or ``VAR_FILE``) is
    written to ``folder`` (mode 0600) and leaves ``os.environ`` (``VAR`` withheld as :func:`withhold_secrets` does,
    ``VAR_FILE`` dropped), so that processes started from now on inherit neither.

    Returns:
        ``{VAR_FILE: path}`` for each secret written: the environment to give those processes.

    Raises:
        SecretSourceInvalid: As :func:`check_secret_sources` (nothing is written).
    """
    names = secret_names(profile, extra)
    check_secret_sources(names)
    env = secret_env()
    files = {}
    for name in sorted(names):
        value = env.get(name)
        if value is None:
            continue
        files[name + FILE_SUFFIX] = str(folder.write_private(name, value))
        if name in os.environ:
            _withheld[name] = os.environ.pop(name)
        elif name not in _withheld:
            _withheld[name] = value  # read from its file: kept, as a withheld variable is
        os.environ.pop(name + FILE_SUFFIX, None)
    return files
