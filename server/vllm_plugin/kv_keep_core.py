"""Kept prefix KV, the light half: turning it on for a profile's engines, and the keep step around the connector.

Apart from :mod:`kv_keep` (the connector, which imports torch and vLLM's connector API) so that neither the
plugin's start-up nor Turnout's profile preparation imports anything heavy: an engine without the connector
never imports it. Keeping never fails a swap or a stop: an error is logged and the model's next prompts are
prefilled in full, as without the pool.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from server.vllm_plugin.protocol import KeptKV, decode_result

if TYPE_CHECKING:
    from server.profiles import Profile
    from server.vllm_plugin.kv_pool_owner import PoolOwner

__all__ = [
    "CONNECTOR_MODULE",
    "CONNECTOR_NAME",
    "close_kv_pool",
    "keep_before_stop",
    "keep_once",
    "kept_bytes_by_model",
    "kv_transfer_config",
    "server_kv_pool",
    "with_kv_keep",
]

logger = logging.getLogger("turnout.engine.kv_keep")

CONNECTOR_NAME: Final = "TurnoutKVKeep"
CONNECTOR_MODULE: Final = "server.vllm_plugin.kv_keep"
KEEP_KV_UTILITY: Final = "turnout_keep_kv"
#: The longest a keep before a stop may hold the stop up (a copy of the kept bytes at memory speed).
_KEEP_TIMEOUT_S: Final = 60.0
_server_pool: PoolOwner | None = None
_server_pool_lock = threading.Lock()


def kv_transfer_config(
    pool_root: Path, limit_bytes: int, served_name: str, digest_cache: Path | None = None, *, flip_bytes: bool = False
) -> dict[str, Any]:
    """The ``kv_transfer_config`` engine argument that has one model's engine keep its prefix blocks;
    ``digest_cache``: the checkpoint content digests' cache file in the server's state folder (None: none kept);
    ``flip_bytes``: a fault drill's, its kept blocks read back with a byte flipped (``--inject-fault kv:MODEL``)."""
    fault = {"fault_flip_bytes": True} if flip_bytes else {}
    return {
        "kv_connector": CONNECTOR_NAME,
        "kv_connector_module_path": CONNECTOR_MODULE,
        "kv_role": "kv_both",
        # A kept block that cannot be read back is prefilled again, never served wrong or failed.
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {
            "pool_root": str(pool_root),
            "limit_bytes": int(limit_bytes),
            "served_name": served_name,
            "digest_cache": None if digest_cache is None else str(digest_cache),
            **fault,
        },
    }


def with_kv_keep(
    profile: Profile, pool_root: Path | None = None, digest_cache: Path | None = None, flip_bytes: Iterable[str] = ()
) -> Profile:
    """``profile`` with Turnout's connector in every model's engine arguments when ``switching.kv_keep_bytes``
    is set (unchanged otherwise); the pool folder is ``pool_root``, by default this server's own
    (:func:`server_kv_pool`, made on first use), and ``digest_cache`` the content digests' cache file (the pool
    folder goes when the server stops; the state folder this file is in stays); the models of ``flip_bytes`` read
    their kept blocks back with a byte flipped (a fault drill).
    """
    limit = profile.switching.kv_keep_bytes
    if limit is None:
        return profile
    import msgspec

    root = pool_root or server_kv_pool().root
    flipped = set(flip_bytes)
    models = {
        name: msgspec.structs.replace(
            model,
            engine_args={
                **model.engine_args,
                "kv_transfer_config": kv_transfer_config(root, limit, name, digest_cache, flip_bytes=name in flipped),
            },
        )
        for name, model in profile.models.items()
    }
    return msgspec.structs.replace(profile, models=models)


def server_kv_pool() -> PoolOwner:
    """This server's pool folder: its one owner, made on first use (sweeping the folders of dead servers)."""
    global _server_pool
    with _server_pool_lock:
        if _server_pool is None or not _server_pool.alive:
            from server.vllm_plugin.kv_pool_owner import PoolOwner

            _server_pool = PoolOwner()
        return _server_pool


def close_kv_pool() -> None:
    """Remove this server's pool folder, if it made one (the server's shutdown; ``atexit`` does it otherwise)."""
    global _server_pool
    with _server_pool_lock:
        owner, _server_pool = _server_pool, None
    if owner is not None:
        owner.remove()


def keep_once(core: Any) -> dict[str, float]:
    """Engine-core utility: keep ``core``'s prefix-cache blocks in the pool when its model has Turnout's
    connector; ``{}`` otherwise.

    Returns ``kept_blocks``, ``kept_bytes`` and ``keep_ms``.
    """
    if CONNECTOR_MODULE not in sys.modules:
        return {}  # vLLM imports the connector's module when an engine has it: none here
    from server.vllm_plugin.kv_keep import keep_kv

    try:
        return keep_kv(core)
    except Exception:
        logger.exception("keeping the KV blocks failed; the model's next prompts are prefilled in full")
        return {}


async def keep_before_stop(engine: Any) -> KeptKV | None:
    """Have a running ``AsyncLLM`` keep its prefix blocks before it is shut down (``stop``); None when its
    model does not keep KV, or the keep failed."""
    transfer = getattr(getattr(engine, "vllm_config", None), "kv_transfer_config", None)
    if getattr(transfer, "kv_connector", None) != CONNECTOR_NAME:
        return None
    try:
        answer = await asyncio.wait_for(engine.engine_core.call_utility_async(KEEP_KV_UTILITY), _KEEP_TIMEOUT_S)
        kept: KeptKV | None = decode_result(answer, KeptKV) if answer else None
    except Exception as exc:  # a dead or hung engine keeps nothing; its stop goes on
        logger.warning("keeping the KV blocks before the stop failed (%s)", type(exc).__name__)
        return None
    return kept


def kept_bytes_by_model(names: Iterable[str]) -> dict[str, int]:
    """Bytes this server's pool keeps for each served model of ``names``, read at most every few seconds (a
    directory scan of tmpfs, never per request: ``/status`` and ``/metrics`` are open); ``{}`` without a pool."""
    owner = _server_pool
    return owner.kept_bytes(names) if owner is not None else {}
