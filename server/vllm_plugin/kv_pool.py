"""The kept-KV pool: a bounded host-memory store of prefix-cache blocks, keyed by model identity and block hash.

It lives in files under a Turnout-owned folder on tmpfs (``/dev/shm``: host memory, no disk), so that it
outlives an engine restart (``stop``) and is shared by the engine-core process (which decides what is kept and
answers prefix lookups) and the worker processes (which copy block contents in and out). One folder per model
identity (:func:`model_identity`: the weights' and tokenizer's files, dtype, block size, prefix-hash seed), one
file per block, named by vLLM's block hash (a content hash of the block's tokens and of every block before it,
with the cache salt). A block of model A can therefore never serve model B, nor A after its weights changed.

Bound and order: the whole pool (every model) stays within ``limit_bytes``; the least recently used blocks go
first, across models (a file's mtime is its last use: written when kept, touched when restored). Files are
written under a temporary name and renamed, so a reader never sees half a block.

Clean-up: the folder belongs to one Turnout server (``turnout-kv-<pid>``); a pool opened later removes the
folders of servers that are gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

__all__ = ["DEFAULT_POOL_PARENT", "KVPool", "kept_bytes_by_name", "model_identity", "pool_folder"]

#: tmpfs where there is one: the pool is host memory, never disk.
DEFAULT_POOL_PARENT: Final = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
_PREFIX: Final = "turnout-kv-"
_NAMES: Final = "names"
_WEIGHT_SUFFIXES: Final = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def pool_folder(server_pid: int, parent: Path = DEFAULT_POOL_PARENT) -> Path:
    """The pool folder of the Turnout server ``server_pid``."""
    return parent / f"{_PREFIX}{server_pid}"


def model_identity(vllm_config: Any, none_hash_seed: str) -> str:
    """A digest of what a block's contents depend on: weights, tokenizer, dtypes, block size, hash seed.

    Weight and tokenizer files count by name, size and modification time (hashing gigabytes would cost
    seconds): a reload that rewrites a model's weights changes its identity.
    """
    model = vllm_config.model_config
    cache = vllm_config.cache_config
    parts: list[Any] = [
        str(model.model),
        str(getattr(model, "revision", None)),
        str(model.dtype),
        str(getattr(model, "quantization", None)),
        str(cache.cache_dtype),
        int(cache.block_size),
        str(cache.prefix_caching_hash_algo),
        none_hash_seed,
        int(vllm_config.parallel_config.tensor_parallel_size),
        int(vllm_config.parallel_config.pipeline_parallel_size),
        _files_stamp(Path(str(model.model)), _WEIGHT_SUFFIXES),
        str(model.tokenizer),
        _files_stamp(Path(str(model.tokenizer)), (".json", ".model", ".txt", ".tiktoken")),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _files_stamp(folder: Path, suffixes: tuple[str, ...]) -> list[list[Any]]:
    if not folder.is_dir():
        return []  # a hub id: its revision names it
    stamp = []
    for path in sorted(folder.iterdir()):
        if path.name.endswith(suffixes):
            st = path.stat()
            stamp.append([path.name, st.st_size, st.st_mtime_ns])
    return stamp


class KVPool:
    """The pool folder ``root``: kept blocks per model identity, within ``limit_bytes`` in all.

    Args:
        root: The folder (created, mode 0700).
        limit_bytes: The bound of the whole pool (``switching.kv_keep_bytes``).
    """

    def __init__(self, root: Path, limit_bytes: int) -> None:
        self.root = Path(root)
        self.limit_bytes = int(limit_bytes)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    # -- identity -------------------------------------------------------------------------------------------

    def model_dir(self, identity: str) -> Path:
        return self.root / identity

    def claim(self, served_name: str, identity: str) -> None:
        """Record that ``served_name`` now has ``identity``; the blocks of its previous identity are dropped
        (a reload that changed its weights)."""
        record = _name_record(self.root, served_name)
        record.parent.mkdir(mode=0o700, exist_ok=True)
        previous = record.read_text() if record.exists() else None
        if previous and previous != identity:
            shutil.rmtree(self.model_dir(previous), ignore_errors=True)
        _write_atomic(record, identity.encode())

    # -- blocks ---------------------------------------------------------------------------------------------

    def has_block(self, identity: str, key: str) -> bool:
        return (self.model_dir(identity) / key).is_file()

    def write_block(self, identity: str, key: str, data: bytes | memoryview) -> None:
        folder = self.model_dir(identity)
        folder.mkdir(mode=0o700, exist_ok=True)
        _write_atomic(folder / key, data)

    def read_block(self, identity: str, key: str, size: int) -> bytearray:
        """The block's bytes, touched as just used.

        Raises:
            OSError: It is gone (evicted) or unreadable.
            ValueError: It does not hold ``size`` bytes.
        """
        path = self.model_dir(identity) / key
        data = bytearray(size)
        with path.open("rb") as f:
            read = f.readinto(data)
            if read != size or f.read(1):
                raise ValueError(f"kept block {key} holds another size than {size} bytes")
        with contextlib.suppress(OSError):
            os.utime(path)
        return data

    # -- bound ----------------------------------------------------------------------------------------------

    def usage(self) -> dict[str, int]:
        """Bytes kept per model identity."""
        return {identity: sum(size for _, size, _ in files) for identity, files in self._by_model().items()}

    def enforce_bound(self) -> int:
        """Evict the least recently used blocks (any model) until the pool fits its bound; returns bytes freed."""
        files = [entry for entries in self._by_model().values() for entry in entries]
        total = sum(size for _, size, _ in files)
        freed = 0
        for path, size, _ in sorted(files, key=lambda entry: entry[2]):
            if total - freed <= self.limit_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                freed += size
        return freed

    def _by_model(self) -> dict[str, list[tuple[Path, int, int]]]:
        found: dict[str, list[tuple[Path, int, int]]] = {}
        for folder in self._model_dirs():
            entries = found.setdefault(folder.name, [])
            for path in _files(folder):
                with contextlib.suppress(FileNotFoundError):
                    st = path.stat()
                    entries.append((path, st.st_size, st.st_mtime_ns))
        return found

    def _model_dirs(self) -> Iterator[Path]:
        for path in self.root.iterdir():
            if path.is_dir() and path.name != _NAMES:
                yield path

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def sweep(parent: Path = DEFAULT_POOL_PARENT) -> None:
        """Remove the pool folders of Turnout servers that are gone."""
        for path in parent.glob(f"{_PREFIX}*"):
            pid = path.name.removeprefix(_PREFIX)
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)


def kept_bytes_by_name(root: Path, names: Iterable[str]) -> dict[str, int]:
    """Bytes the pool folder ``root`` keeps for each served model of ``names`` (under the identity it last
    claimed; 0 when none); ``{}`` when there is no pool folder. Reads only: creates nothing."""
    if not root.is_dir():
        return {}
    usage = {}
    for name in names:
        try:
            identity = _name_record(root, name).read_text()
        except FileNotFoundError:
            usage[name] = 0
            continue
        usage[name] = _folder_bytes(root / identity)
    return usage


def _folder_bytes(folder: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError):  # no block kept yet, or the folder dropped meanwhile
        for path in _files(folder):
            with contextlib.suppress(FileNotFoundError):  # evicted meanwhile
                total += path.stat().st_size
    return total


def _name_record(root: Path, served_name: str) -> Path:
    """Where the identity ``served_name`` last claimed is written."""
    return root / _NAMES / hashlib.sha256(served_name.encode()).hexdigest()[:32]


def _files(folder: Path) -> Iterable[Path]:
    return (path for path in folder.iterdir() if not path.name.startswith("."))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_atomic(path: Path, data: bytes | memoryview) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
