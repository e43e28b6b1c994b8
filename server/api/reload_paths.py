"""Which files ``POST /admin/reload`` may read: the served profile, or profiles under ``server.reload_dirs``.

A reload reads the file it is given and answers with what is wrong in it, positioned and quoted: pointed at any
file the server can read, it would show that file to whoever may reload (any admin, or anyone under ``--dev``).
So a path is checked before it is opened: resolved with its symlinks, it must be the served profile or a YAML or
JSON file under one of the allowed folders, else the reload is refused and the file is never read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from server.engine import EngineError

__all__ = ["PROFILE_SUFFIXES", "ReloadPathRefused", "ReloadPaths"]

#: The file types a profile may have (``turnout validate`` reads YAML, and JSON as YAML's subset).
PROFILE_SUFFIXES: Final = (".yaml", ".yml", ".json")


class ReloadPathRefused(EngineError):
    """The reload names a file outside the served profile and ``server.reload_dirs``; it was not opened."""

    status_code = 403
    code = "reload_path_refused"

    def __init__(self) -> None:
        super().__init__(
            "A reload reads only the served profile or a YAML/JSON profile under the profile's "
            "server.reload_dirs (default: the served profile's folder); this path is neither, so it was not read."
        )


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
        """``path`` if a reload may read it.

        Raises:
            ReloadPathRefused: It resolves (symlinks followed) outside the allowed files; it was not opened.
        """
        resolved = os.path.realpath(path)
        if resolved == self._profile:
            return path
        inside = any(os.path.commonpath([resolved, folder]) == folder for folder in self._dirs)
        if not inside or not resolved.endswith(PROFILE_SUFFIXES):
            raise ReloadPathRefused()
        return path
