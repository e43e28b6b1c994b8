"""Which files ``POST /admin/reload`` may read: the served profile, or profiles under ``server.reload_dirs``.

A reload reads the file it is given and answers with what is wrong in it, positioned and quoted: pointed at any
file the server can read, it would show that file to whoever may reload (any admin, or anyone under ``--dev``).
So a path is checked before it is opened: resolved with its symlinks, it must be the served profile or a YAML or
JSON file under one of the allowed folders, else the reload is refused and the file is never read.

The check and the read are one: the resolved path is opened once, one component at a time from ``/``, each with
``O_NOFOLLOW``, and the profile is parsed from what that descriptor reads. A symlink put in place of the file or of
a folder on its path after the check (a swap racing the reload) makes the open fail, so the reload is refused,
unread; nothing opens the path a second time.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from typing import Final

from server.engine import EngineError

__all__ = ["PROFILE_SUFFIXES", "ReloadPathInvalid", "ReloadPathRefused", "ReloadPaths"]

#: The file types a profile may have (``turnout validate`` reads YAML, and JSON as YAML's subset).
PROFILE_SUFFIXES: Final = (".yaml", ".yml", ".json")
#: Read at most this much (the profile loader refuses a file over 4 MiB; one byte more tells it so).
_READ_LIMIT: Final = 4 * 2**20 + 1


class ReloadPathRefused(EngineError):
    """The reload names a file outside the served profile and ``server.reload_dirs``; it was not opened."""

    status_code = 403
    code = "reload_path_refused"

    def __init__(self) -> None:
        super().__init__(
            "A reload reads only the served profile or a YAML/JSON profile under the profile's "
            "server.reload_dirs (default: the served profile's folder); this path is neither, so it was not read."
        )


class ReloadPathInvalid(EngineError):
    """The reload's path cannot name a file (a NUL byte in it); nothing was opened."""

    status_code = 400
    code = "invalid_reload_path"

    def __init__(self) -> None:
        super().__init__("The reload's path contains a NUL byte; no file has such a name, so nothing was read.")


class ReloadPaths:
    """The files a server may reload from, fixed when it starts (a reload cannot widen them).

    Args:
        profile: The served profile's file.
        reload_dirs: ``server.reload_dirs`` (relative ones from the profile's folder); None: the profile's folder.
    """

    def __init__(self, profile: str, reload_dirs: Sequence[str] | None) -> None:
        folder = os.path.dirname(os.path.abspath(profile))
        self._profile = os.path.realpath(profile)
        self._dirs = tuple(os.path.realpath(os.path.join(folder, path)) for path in (reload_dirs or [folder]))

    def check(self, path: str) -> str:
        """``path`` resolved (symlinks followed), if a reload may read it.

        Raises:
            ReloadPathInvalid: ``path`` has a NUL byte.
            ReloadPathRefused: It resolves outside the allowed files; it was not opened.
        """
        if "\0" in path:
            raise ReloadPathInvalid()
        resolved = os.path.realpath(path)
        if resolved == self._profile:
            return resolved
        inside = any(os.path.commonpath([resolved, folder]) == folder for folder in self._dirs)
        if not inside or not resolved.endswith(PROFILE_SUFFIXES):
            raise ReloadPathRefused()
        return resolved

    def read(self, path: str) -> bytes:
        """The content of ``path`` if a reload may read it: checked (:meth:`check`), then read through one
        descriptor that opened the resolved path with no symlink followed.

        Raises:
            ReloadPathInvalid: ``path`` has a NUL byte.
            ReloadPathRefused: It resolves outside the allowed files, or a symlink (or something other than a
                regular file) took the place of the checked path before it was opened; nothing was read.
            OSError: The file cannot be read (missing, no permission).
        """
        fd = _open_without_links(self.check(path))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device put there: never read it
                raise ReloadPathRefused()
            chunks: list[bytes] = []
            size = 0
            while size < _READ_LIMIT and (chunk := os.read(fd, _READ_LIMIT - size)):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


def _open_without_links(resolved: str) -> int:
    """A read-only descriptor of ``resolved`` (absolute, without symlinks when it was resolved), opened from ``/``
    one component at a time with ``O_NOFOLLOW``: a symlink met anywhere on the way is refused, not followed.

    Raises:
        ReloadPathRefused: A component is now a symlink (or a folder on the way is no longer one).
        OSError: Any other failure to open (missing, no permission).
    """
    parts = [part for part in resolved.split("/") if part]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            # O_NONBLOCK: opening a FIFO put in the file's place must not hang the reload (fstat refuses it).
            kind = os.O_NONBLOCK if last else os.O_DIRECTORY
            try:
                child = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | kind, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ReloadPathRefused() from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd
