"""A checkpoint's files named by their content, so that kept KV blocks never cross a change of weights.

A file's name, size and modification time do not name its content: ``cp -p``, ``rsync -a`` or a tar extract of a
fine-tune of the same architecture rewrites every weight with the old sizes and times. :func:`content_stamp`
hashes each matching file's bytes (BLAKE2b; subfolders too). Hashing a gigabyte takes about a second, so a digest
is kept in a cache file keyed by the file's device, inode, size, modification *and change* times: every rewrite
changes the change time (no user call can set it back), so a rewritten file is hashed again, and an untouched one
costs a ``stat``.

The cache file lives in the server's private state folder (``server/engine/runtime/state_folder.py``), which
outlives the server: a restart reads the digests instead of hashing every checkpoint again (about 20 s for 16 GiB).
The server hands its path down (the kept-KV connector's ``digest_cache``); it is used only in a private folder of
this user's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Final

from server.vllm_plugin.private_folder import check_private

__all__ = ["CONTENT_DIGESTS_FILE", "TOKENIZER_SUFFIXES", "WEIGHT_SUFFIXES", "ContentDigests", "content_stamp"]

#: The cache file's name in the state folder.
CONTENT_DIGESTS_FILE: Final = "content-digests.json"
#: The files of a checkpoint that hold its weights, and those that shape its tokenizer and chat template.
WEIGHT_SUFFIXES: Final = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TOKENIZER_SUFFIXES: Final = (".json", ".model", ".txt", ".tiktoken", ".jinja")


class ContentDigests:
    """File digests cached in ``cache_file`` (JSON, rewritten whole and atomically; None: this process only).

    A cache file outside a private folder of this user's is not used (anyone could plant digests there). Two
    engines writing it at once lose, at worst, one another's new entries, which costs a hash again later."""

    def __init__(self, cache_file: Path | None = None) -> None:
        self._file = cache_file
        self._entries: dict[str, list[Any]] = {}
        self._dirty = False
        if cache_file is not None:
            try:
                check_private(cache_file.parent)
            except (OSError, ValueError):
                self._file = None
                return
            with contextlib.suppress(OSError, ValueError):
                loaded = json.loads(cache_file.read_text())
                if isinstance(loaded, dict):
                    self._entries = loaded

    def digest(self, path: Path) -> str:
        """``path``'s content digest, from the cache while the file's stat key holds."""
        st = path.stat()
        key = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        name = str(path.resolve())
        cached = self._entries.get(name)
        if isinstance(cached, list) and cached[:-1] == key:
            return str(cached[-1])
        with path.open("rb") as stream:
            digest = hashlib.file_digest(stream, lambda: hashlib.blake2b(digest_size=16)).hexdigest()
        self._entries[name] = [*key, digest]
        self._dirty = True
        return digest

    def save(self) -> None:
        """Write the cache file if a digest was added (atomically: a reader sees the old file or the new)."""
        if self._file is None or not self._dirty:
            return
        fd, tmp = tempfile.mkstemp(dir=self._file.parent, prefix=".digests-")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(self._entries, out)
            os.replace(tmp, self._file)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return
        self._dirty = False


def content_stamp(folder: Path, suffixes: tuple[str, ...], digests: ContentDigests) -> list[list[str]]:
    """``[relative path, content digest]`` of every file under ``folder`` (subfolders too) whose name ends with
    one of ``suffixes``, sorted; empty for a folder that is not one (a hub id, which its revision names)."""
    if not folder.is_dir():
        return []
    files = sorted(path for path in folder.rglob("*") if path.name.endswith(suffixes) and path.is_file())
    return [[str(path.relative_to(folder)), digests.digest(path)] for path in files]
