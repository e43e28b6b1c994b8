"""Turnout's private state folder: what this user's servers keep between runs and hand to their own processes.

The folder is ``$XDG_STATE_HOME/turnout``, else ``~/.local/state/turnout`` (the XDG base directories' place for
state that outlives a run but is no cache). It holds files no other local user may read: the admin token
``turnout serve`` generates (``turnout switch`` reads it there), and the secrets ``turnout ray-serve`` hands its
replicas as files, never as environment values. Later state (measured switch costs, ...) goes there too.

One owner (:class:`StateDir`) creates it (mode 0700) and checks it before each use, without following links
(``server.vllm_plugin``'s ``check_private``): a folder that is a link, another user's, or open to group or others is
refused with the reason (never "repaired": a ``chmod`` would act on what someone else planted). Each file is
written under a fresh name with ``O_EXCL | O_NOFOLLOW`` and mode 0600, then renamed into place (a rename replaces
the name itself, never what a planted link points to), and read with ``O_NOFOLLOW``, only if it is a regular file
of this user that nobody else may read or write.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Final

from server.vllm_plugin import FolderNotPrivate, check_private, private_subfolder

__all__ = ["StateDir", "state_dir", "state_home"]

#: A name in the folder: one plain file or folder name (no separator, no ``..``, no hidden name).
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def state_home() -> Path:
    """``$XDG_STATE_HOME/turnout``, else ``~/.local/state/turnout`` (the folder, whether or not it exists)."""
    home = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(home) / "turnout"


class StateDir:
    """This user's private state folder (see the module's docstring).

    Args:
        root: The folder (default :func:`state_home`); created mode 0700 (its parents as needed) unless it exists.

    Raises:
        FolderNotPrivate: The folder is a link, another user's, or not mode 0700.
        OSError: It cannot be created.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else state_home()
        # The state home above it is the user's own (created 0700 when missing); only this folder is Turnout's.
        self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_subfolder(self.root.parent, self.root.name)

    def path(self, name: str) -> Path:
        """The path of ``name`` in the folder, once the folder is checked again (it may have changed since).

        Raises:
            ValueError: ``name`` is not one plain file name.
            FolderNotPrivate: The folder is no longer this user's private folder.
        """
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a plain file name")
        check_private(self.root)
        return self.root / name

    def write_private(self, name: str, text: str) -> Path:
        """Write ``text`` to ``name`` (mode 0600), replacing what was there in one rename; returns its path."""
        target = self.path(name)
        fresh = self.root / f".{name}.{secrets.token_hex(8)}"
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(fresh, target)
        except BaseException:
            fresh.unlink(missing_ok=True)
            raise
        return target

    def read_private(self, name: str) -> str | None:
        """The text of ``name``; None when there is no such file.

        Raises:
            FolderNotPrivate: The folder, or the file, is not private: a link, another user's, or open to others.
        """
        path = self.path(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise FolderNotPrivate(f"{path} is a link: not used") from None
        with os.fdopen(fd, encoding="utf-8") as file:
            st = os.fstat(file.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                mode = stat.S_IMODE(st.st_mode)
                raise FolderNotPrivate(f"{path} is not a private file of this user (mode {mode:o}): not used")
            return file.read()

    def remove(self, name: str) -> None:
        """Remove the file ``name`` if it is there."""
        self.path(name).unlink(missing_ok=True)

    def run_folder(self, prefix: str) -> Path:
        """A fresh private subfolder (mode 0700, a name nobody can predict) for one run's files; the caller
        removes it (:meth:`remove_folder`) on every exit path."""
        if not _NAME.fullmatch(prefix):
            raise ValueError(f"{prefix!r} is not a plain file name")
        check_private(self.root)
        return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=self.root))

    def remove_folder(self, folder: Path) -> None:
        """Remove a folder :meth:`run_folder` made (its files too); a folder elsewhere is left alone."""
        if folder.parent == self.root and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)


_state_dir: StateDir | None = None


def state_dir() -> StateDir:
    """This process's state folder (:class:`StateDir` of :func:`state_home`), made on first use.

    Raises:
        FolderNotPrivate, OSError: As :class:`StateDir`.
    """
    global _state_dir
    if _state_dir is None or _state_dir.root != state_home():
        _state_dir = StateDir()
    return _state_dir
