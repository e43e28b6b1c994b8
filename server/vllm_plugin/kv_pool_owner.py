"""The owner of the kept-KV pool's folder: one object in the server process, for the process's life.

It creates the folder privately (``mkdtemp`` under ``/dev/shm``: a name nobody can predict, this user's, mode
0700), holds an exclusive ``flock`` on the lock file inside it while the server lives, and removes it on every
exit path it sees (``turnout serve``'s shutdown, SIGTERM included, and ``atexit``). Engine processes receive only
the path, and check it themselves before use (``private_folder.check_private``).

The folders of servers that died without removing theirs are found by their lock, not by pid: a folder is swept
only when it is this user's own real folder and its lock can be taken at once (nobody holds it). So containers
that share ``/dev/shm`` (each with its own pid namespace) never touch each other's live pools, and another
user's folders, links and files are never touched at all.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from server.vllm_plugin.kv_pool import DEFAULT_POOL_PARENT, kept_bytes_by_name
from server.vllm_plugin.private_folder import check_private

__all__ = ["LOCK_NAME", "POOL_PREFIX", "USAGE_TTL_S", "PoolOwner", "sweep_dead_pools"]

logger = logging.getLogger("turnout.engine.kv_keep")

POOL_PREFIX: Final = "turnout-kv-"
LOCK_NAME: Final = ".lock"
#: A folder of ours without a lock file is swept only when older than this: its server may be creating it now.
_UNLOCKED_GRACE_S: Final = 60.0
#: ``/status`` and ``/metrics`` read the pool's figures at most this often (a directory scan of tmpfs).
USAGE_TTL_S: Final = 5.0


class PoolOwner:
    """This server's pool folder ``root``, locked while it lives (the folders of dead servers are swept first).

    Args:
        parent: Where the folder is made (tmpfs: ``/dev/shm``).
        usage_ttl_s: How long :meth:`kept_bytes` answers from its last reading.
    """

    def __init__(self, parent: Path = DEFAULT_POOL_PARENT, *, usage_ttl_s: float = USAGE_TTL_S) -> None:
        sweep_dead_pools(parent)
        self.root = Path(tempfile.mkdtemp(prefix=POOL_PREFIX, dir=parent))
        self._pid = os.getpid()
        fd = -1
        try:
            fd = os.open(
                self.root / LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            check_private(self.root)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self._lock_fd: int | None = fd
        self._usage_ttl_s = usage_ttl_s
        self._usage: tuple[float, tuple[str, ...], dict[str, int]] | None = None
        self._usage_lock = threading.Lock()
        atexit.register(self.remove)
        logger.info("kept-KV pool: %s", self.root)

    @property
    def alive(self) -> bool:
        """Whether the folder is still held (not removed yet)."""
        return self._lock_fd is not None

    def check(self) -> None:
        """Raise ``FolderNotPrivate`` (or ``FileNotFoundError``) unless the folder is still this user's own."""
        check_private(self.root)

    def kept_bytes(self, names: Iterable[str]) -> dict[str, int]:
        """Bytes kept for each served model of ``names``, read at most every ``usage_ttl_s`` (``{}``: removed)."""
        wanted = tuple(names)
        if not self.alive:
            return {}
        with self._usage_lock:
            now = time.monotonic()
            if self._usage is not None and self._usage[1] == wanted and now - self._usage[0] < self._usage_ttl_s:
                return dict(self._usage[2])
            usage = kept_bytes_by_name(self.root, wanted)
            self._usage = (now, wanted, usage)
            return dict(usage)

    def remove(self) -> None:
        """Remove the folder and let its lock go (idempotent; a forked child never removes its parent's)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is None or os.getpid() != self._pid:
            return
        atexit.unregister(self.remove)
        try:
            check_private(self.root)  # still our own real folder: never remove what replaced it
            shutil.rmtree(self.root)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("the kept-KV pool %s was not removed: %s", self.root, exc)
        finally:
            os.close(fd)


def sweep_dead_pools(parent: Path = DEFAULT_POOL_PARENT) -> list[Path]:
    """Remove the pool folders of this user's servers that are gone (nobody holds their lock); returns them."""
    swept: list[Path] = []
    uid = os.geteuid()
    with contextlib.suppress(FileNotFoundError), os.scandir(parent) as listing:
        candidates = [entry for entry in listing if entry.name.startswith(POOL_PREFIX)]
    for entry in candidates:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue  # a link, a file, another user's folder: never ours to remove
        path = Path(entry.path)
        if _dead(path, st.st_mtime):
            shutil.rmtree(path, ignore_errors=True)  # descriptor-based: links inside are unlinked, not followed
            swept.append(path)
    return swept


def _dead(folder: Path, mtime: float) -> bool:
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return time.time() - mtime > _UNLOCKED_GRACE_S  # died before its lock was made (or an older Turnout's)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live server holds it
        return True
    finally:
        os.close(fd)
