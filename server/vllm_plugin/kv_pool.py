"""The kept-KV pool: a bounded host-memory store of prefix-cache blocks, keyed by model identity and block hash.

It lives in files under a private folder on tmpfs (``/dev/shm``: host memory, no disk), so that it outlives an
engine restart (``stop``) and is shared by the engine-core process (which decides what is kept and answers prefix
lookups) and the worker processes (which copy block contents in and out). One folder per model identity
(:func:`model_identity`: the weights' and tokenizer's files by content, dtype, block size, prefix-hash seed), one
file per block, named by vLLM's block hash (a content hash of the block's tokens and of every block before it, with the
cache salt) and ending with a digest of its name and bytes that a restore checks. A block of model A can therefore
never serve model B, nor A after its weights changed, nor bytes changed since they were kept.

Bound and order: the whole pool (every model) stays within ``limit_bytes``, counted in the memory its files take
(allocated blocks, not their stated size); room is made before a keep writes, the least recently used blocks
first, across models (a file's mtime is its last use: written when kept, touched when restored). Files are
written under a temporary name and renamed, so a reader never sees half a block. A keep that would leave tmpfs
short of :data:`FREE_MARGIN_MIN_BYTES` (or :data:`FREE_MARGIN_FRACTION` of it) is skipped: vLLM's own shared
memory lives there too, and a full ``/dev/shm`` ends it with SIGBUS.

Privacy: the folder is created by the server (``kv_pool_owner.PoolOwner``) and every process checks it before use
(``private_folder.check_private``: a real folder, not a link, of this user, mode 0700). Inside it only fixed-length
hex names are read or written (identities of 32 digits, block keys of vLLM's 16- or 32-byte hashes), nothing is opened
through a link (``O_NOFOLLOW``, ``lstat``), and an entry of another user or kind is ignored, never removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from server.vllm_plugin.checkpoint_content import TOKENIZER_SUFFIXES, WEIGHT_SUFFIXES, ContentDigests, content_stamp
from server.vllm_plugin.private_folder import check_private, private_subfolder

__all__ = [
    "BLOCK_DIGEST_BYTES",
    "DEFAULT_POOL_PARENT",
    "FREE_MARGIN_FRACTION",
    "FREE_MARGIN_MIN_BYTES",
    "KVPool",
    "block_digest",
    "kept_bytes_by_name",
    "model_identity",
]

#: tmpfs where there is one: the pool is host memory, never disk.
DEFAULT_POOL_PARENT: Final = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
#: What a keep leaves free on tmpfs at least: this share of its size, and never less than the bytes below.
FREE_MARGIN_FRACTION: Final = 0.1
FREE_MARGIN_MIN_BYTES: Final = 32 * 2**20
_NAMES: Final = "names"
#: Each block file ends with this many bytes of BLAKE2b over its name and contents.
BLOCK_DIGEST_BYTES: Final = 16
_IDENTITY: Final = re.compile(r"[0-9a-f]{32}")
#: vLLM's block hashes: 16 bytes (xxhash) or 32 (sha256); a tensor-parallel rank's shard adds ``.r<rank>``.
_KEY: Final = re.compile(r"(?:[0-9a-f]{32}|[0-9a-f]{64})(?:\.r[0-9]{1,4})?")
_NOFOLLOW: Final = os.O_NOFOLLOW | os.O_CLOEXEC


def model_identity(vllm_config: Any, none_hash_seed: str, digests: ContentDigests | None = None) -> str:
    """A digest of what a block's contents depend on: weights, tokenizer, dtypes, block size, hash seed.

    Weight and tokenizer files count by content (:mod:`checkpoint_content`; subfolders too), so a checkpoint
    rewritten with the same sizes and times changes its identity; ``digests`` caches their hashes (default: this
    call only). A hub id counts by its revision.
    """
    digests = digests or ContentDigests()
    model = vllm_config.model_config
    cache = vllm_config.cache_config
    parts: list[Any] = [
        str(model.model),
        str(getattr(model, "revision", None)),
        str(getattr(model, "tokenizer_revision", None)),
        str(model.dtype),
        str(getattr(model, "quantization", None)),
        str(cache.cache_dtype),
        int(cache.block_size),
        str(cache.prefix_caching_hash_algo),
        none_hash_seed,
        int(vllm_config.parallel_config.tensor_parallel_size),
        int(vllm_config.parallel_config.pipeline_parallel_size),
        content_stamp(Path(str(model.model)), WEIGHT_SUFFIXES, digests),
        str(model.tokenizer),
        content_stamp(Path(str(model.tokenizer)), TOKENIZER_SUFFIXES, digests),
    ]
    digests.save()
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


class KVPool:
    """The pool folder ``root``: kept blocks per model identity, within ``limit_bytes`` in all.

    Args:
        root: The folder, made by the server's :class:`~server.vllm_plugin.kv_pool_owner.PoolOwner`.
        limit_bytes: The bound of the whole pool (``switching.kv_keep_bytes``).

    Raises:
        FolderNotPrivate: ``root`` is not a private folder of this user (:func:`check_private`).
        FileNotFoundError: There is no ``root``.
    """

    def __init__(self, root: Path, limit_bytes: int) -> None:
        self.root = Path(root)
        self.limit_bytes = int(limit_bytes)
        self.check()

    def check(self) -> None:
        """Raise :class:`FolderNotPrivate` (or ``FileNotFoundError``) unless the folder is still this user's own."""
        check_private(self.root)

    # -- identity -------------------------------------------------------------------------------------------

    def model_dir(self, identity: str) -> Path:
        """The folder of ``identity``'s blocks; ``ValueError`` for anything but 32 hex digits."""
        return self.root / _valid(_IDENTITY, identity)

    def claim(self, served_name: str, identity: str) -> None:
        """Record that ``served_name`` now has ``identity``; the blocks of its previous identity are dropped
        (a reload that changed its weights). A record that holds anything but an identity is overwritten."""
        self.check()
        folder = self.model_dir(identity)
        names = private_subfolder(self.root, _NAMES)
        record = names / _name_key(served_name)
        previous = _read_identity(record)
        if previous is not None and previous != folder.name:
            _remove_entry(self.root, previous)
        _write_atomic(record, folder.name.encode())

    # -- blocks ---------------------------------------------------------------------------------------------

    def has_block(self, identity: str, key: str) -> bool:
        """Whether a block is kept (False for a name that is not one: a lookup never fails the scheduler)."""
        try:
            st = os.lstat(self.model_dir(identity) / _valid(_KEY, key))
        except (FileNotFoundError, ValueError):
            return False
        return stat.S_ISREG(st.st_mode)

    def write_block(self, identity: str, key: str, data: bytes | memoryview) -> None:
        """Write one block, its digest after it (room for it is made first: :meth:`make_room`)."""
        folder = private_subfolder(self.root, self.model_dir(identity).name)
        _write_atomic(folder / _valid(_KEY, key), data, block_digest(identity, key, data))

    def touch(self, identity: str, key: str) -> None:
        """Mark a kept block as just used (no-op when it is gone)."""
        with contextlib.suppress(FileNotFoundError), _open_block(self.model_dir(identity) / _valid(_KEY, key)) as fd:
            os.utime(fd)

    def read_block(self, identity: str, key: str, size: int, *, flip: bool = False) -> bytearray:
        """The block's bytes, touched as just used; ``flip``: a fault drill's (``--inject-fault kv:MODEL``), a byte
        flipped as read, which the digest then refuses.

        Raises:
            OSError: It is gone (evicted), unreadable, or not a plain file.
            ValueError: It does not hold ``size`` bytes and their digest, its bytes do not match the digest
                written with them (changed since, or another block's), or ``identity`` or ``key`` is not a hex
                name: a miss, never an answer.
        """
        data = bytearray(size)
        digest = bytearray(BLOCK_DIGEST_BYTES)
        with _open_block(self.model_dir(identity) / _valid(_KEY, key)) as fd, os.fdopen(fd, "rb", closefd=False) as f:
            read = f.readinto(data)
            if flip and size:
                data[0] ^= 0xFF
            if read != size or f.readinto(digest) != BLOCK_DIGEST_BYTES or f.read(1):
                raise ValueError(f"kept block {key} holds another size than {size} bytes")
            if not hmac.compare_digest(digest, block_digest(identity, key, data)):
                raise ValueError(f"kept block {key} does not match its digest")
            with contextlib.suppress(OSError):
                os.utime(fd)
        return data

    # -- bound ----------------------------------------------------------------------------------------------

    def usage(self) -> dict[str, int]:
        """Bytes kept per model identity (the memory the files take)."""
        return {identity: sum(size for _, size, _ in files) for identity, files in self._by_model().items()}

    def make_room(self, incoming_bytes: int) -> int:
        """Evict the least recently used blocks (any model) until ``incoming_bytes`` more fit in the bound;
        returns bytes freed."""
        files = [entry for entries in self._by_model().values() for entry in entries]
        total = sum(size for _, size, _ in files)
        freed = 0
        for path, size, _ in sorted(files, key=lambda entry: entry[2]):
            if total - freed + incoming_bytes <= self.limit_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                freed += size
        return freed

    def enforce_bound(self) -> int:
        """Evict the least recently used blocks until the pool fits its bound; returns bytes freed."""
        return self.make_room(0)

    def leaves_free(self, incoming_bytes: int) -> bool:
        """Whether writing ``incoming_bytes`` leaves tmpfs its safe margin free (``FREE_MARGIN_*``)."""
        fs = os.statvfs(self.root)
        margin = max(FREE_MARGIN_MIN_BYTES, int(fs.f_blocks * fs.f_frsize * FREE_MARGIN_FRACTION))
        return fs.f_bavail * fs.f_frsize - incoming_bytes >= margin

    def _by_model(self) -> dict[str, list[tuple[Path, int, int]]]:
        found: dict[str, list[tuple[Path, int, int]]] = {}
        for folder in _entries(self.root, _IDENTITY, stat.S_ISDIR):
            found[folder.name] = [(Path(e.path), size, mtime) for e, size, mtime in _blocks(Path(folder.path))]
        return found


def kept_bytes_by_name(root: Path, names: Iterable[str]) -> dict[str, int]:
    """Bytes the pool folder ``root`` keeps for each served model of ``names`` (under the identity it last
    claimed; 0 when none); ``{}`` when there is no pool folder of this user's own. Reads only: creates nothing."""
    try:
        check_private(root)
    except OSError:
        return {}
    usage = {}
    for name in names:
        identity = _read_identity(root / _NAMES / _name_key(name))
        usage[name] = 0 if identity is None else sum(size for _, size, _ in _blocks(root / identity))
    return usage


def _valid(pattern: re.Pattern[str], name: str) -> str:
    if not isinstance(name, str) or pattern.fullmatch(name) is None:
        raise ValueError(f"not a kept-KV pool name: {name!r}")
    return name


def _name_key(served_name: str) -> str:
    """The file name of the record of the identity ``served_name`` last claimed."""
    return hashlib.sha256(served_name.encode()).hexdigest()[:32]


def _read_identity(record: Path) -> str | None:
    """The identity a names record holds; None when there is none, or it holds anything else."""
    try:
        with _open_block(record) as fd:
            text = os.read(fd, 64).decode("ascii", errors="replace")
    except OSError:
        return None
    return text if _IDENTITY.fullmatch(text) else None


def _entries(folder: Path, pattern: re.Pattern[str], kind: Any) -> Iterator[os.DirEntry[str]]:
    """``folder``'s entries of this user named by ``pattern`` and of ``kind`` (``stat.S_ISDIR``/``S_ISREG``),
    never through a link."""
    uid = os.geteuid()
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(folder) as listing:
        for entry in listing:
            if pattern.fullmatch(entry.name) is None:
                continue
            with contextlib.suppress(FileNotFoundError):
                st = entry.stat(follow_symlinks=False)
                if kind(st.st_mode) and st.st_uid == uid:
                    yield entry


def _blocks(folder: Path) -> Iterator[tuple[os.DirEntry[str], int, int]]:
    """The block files of a model folder: (entry, bytes allocated, mtime). A sparse file counts what it takes."""
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.lstat(folder).st_mode):
            return
    for entry in _entries(folder, _KEY, stat.S_ISREG):
        with contextlib.suppress(FileNotFoundError):
            st = entry.stat(follow_symlinks=False)
            yield entry, st.st_blocks * 512, st.st_mtime_ns


@contextlib.contextmanager
def _open_block(path: Path) -> Iterator[int]:
    """A read-only descriptor of the plain file ``path``, never through a link."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a plain file")
        yield fd
    finally:
        os.close(fd)


def _remove_entry(root: Path, name: str) -> None:
    """Remove ``root/name`` without following a link: a link or file is unlinked, a folder removed by
    ``shutil.rmtree``'s descriptor-based walk (which unlinks the links it meets, never their targets)."""
    path = root / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode) and shutil.rmtree.avoids_symlink_attacks:
        shutil.rmtree(path, ignore_errors=True)
    elif not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def block_digest(identity: str, key: str, data: bytes | bytearray | memoryview) -> bytes:
    """A block's digest over its name and bytes: a block renamed, moved to another model or changed in place no
    longer matches."""
    digest = hashlib.blake2b(f"{identity}/{key}".encode(), digest_size=BLOCK_DIGEST_BYTES)
    digest.update(data)
    return digest.digest()


def _write_atomic(path: Path, *parts: bytes | memoryview) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".")
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)  # replaces a link named ``path`` itself, never its target
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
