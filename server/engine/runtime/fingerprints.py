"""Each model's fingerprint: what its fixed probe answered, on record in the private state folder.

A fingerprint is kept per served model, with the key of everything that shapes the answer: the checkpoint's weights
and tokenizer files by content (``server.vllm_plugin``'s content digests, cached in the state folder so that a
restart reads them instead of hashing again), the chat template, dtype, quantization, the LoRA set and vLLM's
version. A restart compares with what ran before; a key that changed says the checkpoint did (the proof then lets a
plain start decide). Files are the state folder's own: mode 0600, written in one rename (:class:`StateDir`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import msgspec

from server.engine.runtime.state_folder import StateDir, state_dir
from server.profiles.schema import ModelProfile
from server.vllm_plugin import (
    CONTENT_DIGESTS_FILE,
    TOKENIZER_SUFFIXES,
    WEIGHT_SUFFIXES,
    ContentDigests,
    FolderNotPrivate,
    content_stamp,
)

__all__ = [
    "Fingerprint",
    "FingerprintStore",
    "content_digests",
    "digest_cache_file",
    "fingerprint_key",
    "model_dtype",
]

logger = logging.getLogger("turnout.engine")


class Fingerprint(msgspec.Struct, frozen=True, kw_only=True):
    """One model's probe reading on record (it is a :class:`~server.engine.types.ProbeReading`).

    Attributes:
        key: The digest of what shapes the answer (:func:`fingerprint_key`).
        dtype: The dtype the reading was taken at (it sets the comparison's tolerances).
        tokens: The greedy output token ids.
        top: Per output position, the two most likely ``[token id, logprob]`` pairs.
        vector: A pooling model's vector (None for a generating model).
        skipped: Always None on record (a skipped probe records nothing).
    """

    key: str
    dtype: str
    tokens: list[int] = msgspec.field(default_factory=list)
    top: list[list[tuple[int, float]]] = msgspec.field(default_factory=list)
    vector: list[float] | None = None
    skipped: str | None = None


def digest_cache_file(state: StateDir | None = None) -> Path | None:
    """The checkpoint content digests' cache file in ``state`` (default: this user's state folder); None when the
    folder cannot be used (logged: each start then hashes the checkpoints again)."""
    try:
        return (state or state_dir()).path(CONTENT_DIGESTS_FILE)
    except (OSError, FolderNotPrivate) as exc:
        logger.warning("checkpoint digests are not cached (%s): each start hashes its files again", exc)
        return None


def content_digests(state: StateDir | None = None) -> ContentDigests:
    """The checkpoint files' digests, cached in ``state`` (:func:`digest_cache_file`)."""
    return ContentDigests(digest_cache_file(state))


def model_dtype(profile: ModelProfile) -> str:
    """The dtype the profile asks for (``auto``: the checkpoint's own, which the key then covers by content)."""
    return str(profile.engine_args.get("dtype", "auto"))


def fingerprint_key(profile: ModelProfile, digests: ContentDigests, vllm_version: str) -> str:
    """The digest of everything that shapes ``profile``'s probe answer (see the module's docstring)."""
    args = profile.engine_args
    tokenizer = str(args.get("tokenizer") or profile.model)
    lora = sorted((profile.lora_modules or {}).items())
    parts: list[Any] = [
        profile.model,
        str(args.get("revision")),
        content_stamp(Path(profile.model), WEIGHT_SUFFIXES, digests),
        tokenizer,
        str(args.get("tokenizer_revision")),
        content_stamp(Path(tokenizer), TOKENIZER_SUFFIXES, digests),
        profile.chat_template,
        _file_digest(profile.chat_template, digests),
        model_dtype(profile),
        str(args.get("quantization")),
        str(args.get("kv_cache_dtype")),
        _file_digest(profile.quant_config, digests),
        [[name, path, content_stamp(Path(path), WEIGHT_SUFFIXES, digests)] for name, path in lora],
        vllm_version,
    ]
    digests.save()
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _file_digest(path: str | None, digests: ContentDigests) -> str | None:
    if path is None or not Path(path).is_file():
        return None
    return digests.digest(Path(path))


class FingerprintStore:
    """The fingerprints on record, one file per served model in the state folder ``state``."""

    def __init__(self, state: StateDir) -> None:
        self._folder = state

    def load(self, model: str) -> Fingerprint | None:
        """``model``'s fingerprint on record; None when there is none (or it cannot be read: logged)."""
        try:
            text = self._folder.read_private(_file_name(model))
            return None if text is None else msgspec.json.decode(text, type=Fingerprint)
        except (OSError, FolderNotPrivate, msgspec.DecodeError, msgspec.ValidationError) as exc:
            logger.warning("the fingerprint of %s is not used (%s)", model, exc)
            return None

    def save(self, model: str, fingerprint: Fingerprint) -> None:
        """Record ``fingerprint`` as ``model``'s (a failure is logged: the next load records it again)."""
        try:
            self._folder.write_private(_file_name(model), msgspec.json.encode(fingerprint).decode())
        except (OSError, FolderNotPrivate) as exc:
            logger.warning("the fingerprint of %s is not kept (%s)", model, exc)


def _file_name(model: str) -> str:
    """The file of ``model``'s fingerprint: a digest of its name (any served name is a plain file name then)."""
    return f"fingerprint-{hashlib.sha256(model.encode()).hexdigest()[:32]}.json"
