"""Kept prefix KV across model swaps: Turnout's KV connector on vLLM's public ``KVConnectorBase_V1`` API.

vLLM loads it by module path (``kv_transfer_config``: ``kv_connector_module_path`` = this module, see
``kv_keep_core.kv_transfer_config``), in the engine-core process (scheduler role) and in every worker (worker role).

* Keep: when the device leaves a model (the in-place unload, or before a ``stop``), the engine-core utility
  :func:`keep_kv` lists the blocks of vLLM's prefix cache, most recently used first, and has the workers copy
  their contents into the pool (:mod:`kv_pool`), within the pool's bound. Nothing is copied while a model
  serves: keeping costs the swap the copy of the kept bytes, and steady state nothing.
* Restore: when a request's prompt extends kept blocks that vLLM's own prefix cache lacks, the scheduler side
  answers them as externally computed tokens (``get_num_new_matched_tokens``), and the worker side copies them
  into the blocks vLLM allocated before the forward pass. vLLM then caches those blocks by their hash: later
  requests hit them natively. vLLM counts the restored tokens in ``vllm:external_prefix_cache_hits``.
* A block that cannot be read back (evicted meanwhile, a short file) is reported through
  ``get_block_ids_with_load_errors``; with ``kv_load_failure_policy: recompute`` vLLM prefills it normally.

Supports one KV-cache group (plain decoder models); a model with several (hybrid attention) keeps nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from server.vllm_plugin.checkpoint_content import ContentDigests
from server.vllm_plugin.kv_pool import BLOCK_DIGEST_BYTES, KVPool, model_identity

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

__all__ = ["KeepMetadata", "TurnoutKVKeep", "keep_kv", "keep_on_worker"]

logger = logging.getLogger("turnout.engine.kv_keep")


@dataclass
class KeepMetadata(KVConnectorMetadata):
    """One step's restores: (vLLM block id, kept block key) pairs, in the model's pool folder; ``flip``: a fault
    drill's, the blocks read back with a byte flipped. The scheduler side says both for the model it serves now: a
    worker's connector outlives its model (an in-place swap keeps it), so its own settings are another model's."""

    identity: str = ""
    num_blocks: int = 0
    loads: list[tuple[int, str]] = field(default_factory=list)
    flip: bool = False


class TurnoutKVKeep(KVConnectorBase_V1):
    """Both roles of the connector; which one runs is ``role``."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config
        self.pool: KVPool | None = None
        try:  # the path came from the server: used only once checked as this user's private folder
            self.pool = KVPool(Path(extra["pool_root"]), int(extra["limit_bytes"]))
        except (OSError, ValueError) as exc:
            logger.error("the kept-KV pool is not used (%s): this engine keeps nothing", exc)
        #: A fault drill's (``--inject-fault kv:MODEL``): kept blocks are read back with a byte flipped (told to the
        #: workers in each step's metadata, as the identity is).
        self.flip_bytes = bool(extra.get("fault_flip_bytes"))
        #: Files one kept block takes: each tensor-parallel rank keeps its own shard.
        self.shards = max(1, int(vllm_config.parallel_config.tensor_parallel_size))
        self.block_size = int(vllm_config.cache_config.block_size)
        self.num_blocks = int(kv_cache_config.num_blocks)
        self.single_group = len(kv_cache_config.kv_cache_groups) == 1
        self.identity = ""
        self._pending: dict[str, tuple[int, list[str]]] = {}  # request id -> (first block index, keys)
        self._loads: list[tuple[int, str]] = []
        self._kv_caches: dict[str, torch.Tensor] = {}
        self._load_errors: set[int] = set()
        self.restored_blocks = 0
        if role == KVConnectorRole.SCHEDULER and self.pool is not None:
            from vllm.v1.core.kv_cache_utils import get_none_hash_seed

            try:
                cache = extra.get("digest_cache")
                digests = ContentDigests(Path(cache) if cache else None)
                self.identity = model_identity(vllm_config, get_none_hash_seed(), digests)
                self.pool.claim(str(extra["served_name"]), self.identity)
            except (OSError, ValueError) as exc:
                logger.error("the kept-KV pool is not used (%s): this engine keeps nothing", exc)
                self.pool = None

    # -- scheduler side -------------------------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        if not self.single_group or self.pool is None:
            return 0, False
        first = num_computed_tokens // self.block_size
        # The last prompt token is always computed (its logits): never offer the block that holds it in full.
        last = (request.num_tokens - 1) // self.block_size
        keys: list[str] = []
        for block_hash in request.block_hashes[first:last]:
            key = bytes(block_hash).hex()
            if not self.pool.has_block(self.identity, key):
                break
            keys.append(key)
        if not keys:
            return 0, False
        self._pending[request.request_id] = (first, keys)
        return len(keys) * self.block_size, False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        pending = self._pending.pop(request.request_id, None)
        if pending is None or num_external_tokens <= 0:
            return
        first, keys = pending
        block_ids = blocks.get_block_ids()[0]
        count = min(len(keys), num_external_tokens // self.block_size)
        self._loads.extend(zip(block_ids[first : first + count], keys[:count], strict=True))

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta = KeepMetadata(identity=self.identity, num_blocks=self.num_blocks, loads=self._loads, flip=self.flip_bytes)
        self._loads = []
        return meta

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._pending.pop(request.request_id, None)
        return False, None

    def blocks_to_keep(self, block_pool: Any, bytes_per_block: int) -> list[tuple[int, str]]:
        """The prefix cache's blocks, most recently used first, as many as the pool's bound holds."""
        if not self.single_group or bytes_per_block <= 0 or self.pool is None:
            return []
        budget = self.pool.limit_bytes // (bytes_per_block * self.shards)
        in_use = [block for block in block_pool.blocks if block.ref_cnt > 0]
        # vLLM frees a request's blocks tail first: the free queue's end holds the most recent prefixes, head first.
        free = list(reversed(block_pool.free_block_queue.get_all_free_blocks()))
        chosen: list[tuple[int, str]] = []
        for block in [*in_use, *free]:
            if len(chosen) >= budget:
                break
            hashed = block.block_hash
            if hashed is None or block.is_null:
                continue
            chosen.append((block.block_id, bytes(hashed)[:-4].hex()))  # without the 4-byte group id
        return chosen

    # -- worker side ----------------------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        # Called again for every model an in-place swap loads: the worker's connector outlives its model runner.
        self._kv_caches = dict(kv_caches)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KeepMetadata) or not meta.loads or self.pool is None:
            return
        views = self._block_views(meta.num_blocks)
        size = sum(view[0].numel() * view[0].element_size() for view in views)
        for block_id, key in meta.loads:
            try:
                data = self.pool.read_block(meta.identity, _rank_key(key), size, flip=meta.flip)
                _scatter(views, block_id, torch.frombuffer(data, dtype=torch.uint8))
                self.restored_blocks += 1
            except (OSError, ValueError) as exc:
                logger.warning("kept block %s not restored (%s): it is prefilled again", key[:12], exc)
                self._load_errors.add(block_id)

    def get_block_ids_with_load_errors(self) -> set[int]:
        failed, self._load_errors = self._load_errors, set()
        return failed

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv copies every layer before the forward pass

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        return  # nothing is saved while serving: blocks are kept when the device leaves the model

    def wait_for_save(self) -> None:
        return

    def keep_blocks(self, identity: str, num_blocks: int, blocks: list[tuple[int, str]]) -> dict[str, float]:
        """Copy ``blocks`` (vLLM block id, key) of this worker's KV cache into the pool."""
        started = time.perf_counter()
        pool = self.pool
        if pool is None:
            return {}
        pool.check()  # still this user's private folder, before anything is written in it
        views = self._block_views(num_blocks)
        written = 0
        for block_id, key in blocks:
            if pool.has_block(identity, _rank_key(key)):
                pool.touch(identity, _rank_key(key))
                continue
            data = _gather(views, block_id)
            pool.write_block(identity, _rank_key(key), data.numpy().data)
            written += data.numel()
        return {
            "kept_blocks": float(len(blocks)),
            "kept_bytes": float(written),
            "keep_ms": (time.perf_counter() - started) * 1000.0,
        }

    def _block_views(self, num_blocks: int) -> list[torch.Tensor]:
        """Each layer's KV cache with the block dimension first (views, no copy), in layer-name order."""
        views = []
        for name in sorted(self._kv_caches):
            tensor = self._kv_caches[name]
            dims = [i for i, size in enumerate(tensor.shape) if size == num_blocks]
            if not dims:
                raise ValueError(f"layer {name}: no dimension of {num_blocks} blocks in {tuple(tensor.shape)}")
            views.append(tensor.movedim(dims[0], 0))
        return views


def _rank_key(key: str) -> str:
    from vllm.distributed import parallel_state

    # Each tensor-parallel rank keeps its own shard of a block; rank 0's file is the one lookups check.
    group = getattr(parallel_state, "_TP", None)
    rank = int(group.rank_in_group) if group is not None else 0
    return key if rank == 0 else f"{key}.r{rank}"


def _gather(views: list[torch.Tensor], block_id: int) -> torch.Tensor:
    return torch.cat([view[block_id].reshape(-1).view(torch.uint8) for view in views])


def _scatter(views: list[torch.Tensor], block_id: int, data: torch.Tensor) -> None:
    offset = 0
    for view in views:
        block = view[block_id]
        nbytes = block.numel() * block.element_size()
        block.copy_(data[offset : offset + nbytes].view(block.dtype).view(block.shape))
        offset += nbytes


# -- the keep step: engine core, then workers ---------------------------------------------------------------


def keep_kv(core: Any) -> dict[str, float]:
    """Engine-core side: keep the current model's prefix-cache blocks in the pool (the scheduler is paused).

    Returns the kept blocks, bytes and milliseconds (zeros when the model's engine does not keep KV).
    """
    scheduler: Any = getattr(core, "scheduler", None)
    connector = getattr(scheduler, "connector", None)
    if not isinstance(connector, TurnoutKVKeep):
        return {}
    pool = connector.pool
    if pool is None:
        return {}
    started = time.perf_counter()
    pool.check()
    manager = scheduler.kv_cache_manager
    bytes_per_block = _bytes_per_block(scheduler.kv_cache_config)
    blocks = connector.blocks_to_keep(manager.block_pool, bytes_per_block)
    # The bound holds before anything is written: the blocks kept already are touched (the youngest), then the
    # least recently used make room for the new ones.
    new = 0
    for _, key in blocks:
        if pool.has_block(connector.identity, key):
            pool.touch(connector.identity, key)
        else:
            new += 1
    incoming = new * bytes_per_block * connector.shards
    pool.make_room(incoming)
    if not pool.leaves_free(incoming):
        logger.warning(
            "not keeping %d KV blocks (%.1f MiB): tmpfs %s would be left short of free memory",
            new,
            incoming / 2**20,
            pool.root,
        )
        return {"kept_blocks": 0.0, "kept_bytes": 0.0, "keep_ms": (time.perf_counter() - started) * 1000.0}
    answers: list[dict[str, float]] = []
    if blocks:
        answers = core.collective_rpc(
            keep_on_worker,
            kwargs={"identity": connector.identity, "num_blocks": connector.num_blocks, "blocks": blocks},
        )
    pool.enforce_bound()  # two engines that kept at once
    kept_bytes = sum(float(a.get("kept_bytes", 0.0)) for a in answers)
    result = {
        "kept_blocks": float(len(blocks)),
        "kept_bytes": kept_bytes,
        "keep_ms": (time.perf_counter() - started) * 1000.0,
    }
    logger.info("kept %d KV blocks (%.1f MiB written) in %.0f ms", len(blocks), kept_bytes / 2**20, result["keep_ms"])
    return result


def keep_on_worker(wrapper: Any, identity: str, num_blocks: int, blocks: list[tuple[int, str]]) -> dict[str, float]:
    """``collective_rpc`` entry: this worker's share of :func:`keep_kv`."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

    if not has_kv_transfer_group():
        return {}
    connector = get_kv_transfer_group()
    if not isinstance(connector, TurnoutKVKeep):
        return {}
    return connector.keep_blocks(identity, num_blocks, blocks)


def _bytes_per_block(kv_cache_config: Any) -> int:
    """What one block takes in the pool: its bytes in every layer, and the digest written after them."""
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        return 0
    return int(groups[0].kv_cache_spec.page_size_bytes) * len(groups[0].layer_names) + BLOCK_DIGEST_BYTES
