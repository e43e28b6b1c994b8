"""A folder only this user can reach: the one check every folder Turnout keeps state in passes before use.

Turnout keeps state across processes in folders (the kept-KV pool on tmpfs, ``kv_pool.py``; the engines' compile
cache, ``server/engine/runtime/compile_cache.py``). Another local user who could pre-create such a folder, or put a
link where it is expected, could read what is kept there or plant what an engine loads (compiled code). So each such
folder is checked without following links (``lstat``): a real folder, of this user, mode 0700; anything else is
refused, never used and never "repaired" (a ``chmod`` would act on what an attacker planted).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["FolderNotPrivate", "check_private", "private_subfolder"]


class FolderNotPrivate(OSError):
    """The folder is a link, another user's, or open to others: it is not used."""


def check_private(folder: Path, *, others_may_read: bool = False) -> None:
    """Raise :class:`FolderNotPrivate` unless ``folder`` is a real folder (not a link) of this user, mode 0700.

    Args:
        folder: The folder.
        others_may_read: Accept any mode in which only this user may write (``0755``: a parent folder that other
            tools of this user share, where nobody else can add, remove or replace an entry).

    Raises:
        FileNotFoundError: There is no ``folder``.
    """
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise FolderNotPrivate(f"{folder} is not a folder (a link or a file): not used")
    if st.st_uid != os.geteuid():
        raise FolderNotPrivate(f"{folder} belongs to uid {st.st_uid}, not {os.geteuid()}: not used")
    mode = stat.S_IMODE(st.st_mode)
    if others_may_read and mode & 0o022:
        raise FolderNotPrivate(f"{folder} has mode {mode:o}, writable by others: not used")
    if not others_may_read and mode != 0o700:
        raise FolderNotPrivate(f"{folder} has mode {mode:o}, not 700: not used")


def private_subfolder(parent: Path, name: str) -> Path:
    """``parent/name``, created with mode 0700 unless it exists, and checked (:func:`check_private`).

    Raises:
        FolderNotPrivate: What is there is not this user's private folder.
        OSError: It cannot be created (``parent`` missing, read-only ...).
    """
    folder = parent / name
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)  # the umask can only take bits away: never more than 0700
    check_private(folder)
    return folder
