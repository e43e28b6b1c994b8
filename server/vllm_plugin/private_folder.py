"""A folder only this user can reach: the one check every folder Turnout keeps state in passes before use.

Turnout keeps state across processes in folders (the kept-KV pool on tmpfs, ``kv_pool.py``; the engines' compile
cache, ``server/engine/runtime/compile_cache.py``). Another local user who could pre-create such a folder, or put a
link where it is expected, could read what is kept there or plant what an engine loads (compiled code). So each such
folder is checked without following links (``lstat``): a real folder, of this user, mode 0700; anything else is
refused, never used and never "repaired" (a ``chmod`` would act on what an attacker planted).

A folder an operator names (``TORCHINDUCTOR_CACHE_DIR``) may sit anywhere: :func:`check_private_path` checks it
and every folder above it, as ``sshd`` checks the folders above ``authorized_keys``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["FolderNotPrivate", "check_private", "check_private_path", "private_subfolder"]


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


def check_private_path(folder: Path) -> Path:
    """``folder``'s real path, once it and each folder above it are safe from other users; else raise.

    ``folder`` itself (links resolved) must be this user's folder that nobody else may write (``0755`` passes); each
    folder above it must be this user's or root's, and either writable by its owner only or sticky (``/tmp``: there
    nobody may rename or remove another's entry). So no other user can replace ``folder``, or a link on the way to
    it, between this check and its use. The real path is what to use: a link on the way is not followed again.

    Raises:
        FolderNotPrivate: ``folder`` or a folder above it fails.
        FileNotFoundError: There is no ``folder``.
    """
    real = Path(os.path.realpath(folder))
    check_private(real, others_may_read=True)
    for above in real.parents:
        st = os.lstat(above)
        if st.st_uid not in (0, os.geteuid()):
            raise FolderNotPrivate(f"{above}, above {folder}, belongs to uid {st.st_uid}: {folder} not used")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(st.st_mode)
            raise FolderNotPrivate(f"{above}, above {folder}, has mode {mode:o}, writable by others: not used")
    return real
