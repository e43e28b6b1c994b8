"""The memory a same-shape weights swap reuses: layer buffers handed from layer to layer, the old KV cache.

The end-to-end behaviour (A->B->A answering as fresh engines, rollback) is held by the real-engine tests in
tests/engine/test_in_place_engines.py; these pin the reuse rules themselves, without an engine.
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm.model_executor.model_loader.reload import layerwise

from server.vllm_plugin.weight_reuse import (
    _BufferPool,
    hand_kv_cache,
    keep_kv_cache,
    kv_cache_backing,
    kv_cache_size_fixed,
    reusing_layer_buffers,
    take_kv_cache,
)


def _meta_weight(rows: int = 4, cols: int = 8) -> Any:
    """A parameter as vLLM's reload restores it: on meta, with the attributes its loader needs."""

    def loader(param: Any, loaded: Any) -> None:
        param.data.copy_(loaded)

    weight = torch.nn.Parameter(torch.empty(rows, cols, device="meta"), requires_grad=False)
    weight.weight_loader = loader  # type: ignore[attr-defined]
    weight.output_dim = 0  # type: ignore[attr-defined]
    return weight


class _Info:
    restore_device = torch.device("cpu")


def test_a_buffer_goes_to_the_next_layer_only_once_its_layer_let_go_of_it() -> None:
    pool = _BufferPool()
    meta = _meta_weight()
    first = pool.take(meta)
    assert not first.is_meta and first.shape == (4, 8) and type(first) is torch.nn.Parameter
    assert first.weight_loader is meta.weight_loader and first.output_dim == 0  # the attributes come along
    held = pool.take(meta)
    assert held.data_ptr() != first.data_ptr()  # the first is still in use: a second buffer
    pointer = first.data_ptr()
    del first
    assert pool.take(meta).data_ptr() == pointer
    assert pool.take(_meta_weight(8, 4)).data_ptr() not in (pointer, held.data_ptr())  # another shape


def test_materializing_a_layer_drops_its_old_packed_gemm_and_the_patch_goes_on_exit() -> None:
    original = layerwise.materialize_layer
    layer = torch.nn.Module()
    layer.register_parameter("weight", _meta_weight())
    layer.cpu_linear = lambda x, weight, bias: x  # what vLLM's CPU dispatch leaves: a closure on the packed weight
    with reusing_layer_buffers():
        layerwise.materialize_layer(layer, _Info())
    assert not layer.weight.is_meta
    assert "cpu_linear" not in layer.__dict__
    assert layerwise.materialize_layer is original


def test_the_patch_goes_when_the_reload_fails() -> None:
    original = layerwise.materialize_layer
    with pytest.raises(RuntimeError, match="checkpoint"), reusing_layer_buffers():
        raise RuntimeError("a corrupt checkpoint")
    assert layerwise.materialize_layer is original


class _Runner:
    def __init__(self) -> None:
        self.allocated: list[torch.Tensor] = []

    def initialize_kv_cache_tensors(self, size: int) -> torch.Tensor:
        buffer = torch.zeros(size, dtype=torch.int8, device=torch.device("cpu"))
        self.allocated.append(buffer)
        return buffer


def test_the_next_kv_cache_of_the_same_size_takes_the_old_memory_zeroed_once() -> None:
    runner = _Runner()
    backing = torch.full((64,), 7, dtype=torch.int8)
    keep_kv_cache(runner, backing)
    reused = runner.initialize_kv_cache_tensors(64)
    assert reused.data_ptr() == backing.data_ptr()
    assert int(reused.abs().sum()) == 0  # nothing the old model wrote survives
    assert runner.initialize_kv_cache_tensors(64).data_ptr() != backing.data_ptr()  # once only


def test_a_kv_cache_of_another_size_is_allocated_after_the_old_one_is_let_go() -> None:
    runner = _Runner()
    backing = torch.full((64,), 7, dtype=torch.int8)
    gone = weakref.ref(backing)
    keep_kv_cache(runner, backing)
    del backing
    fresh = runner.initialize_kv_cache_tensors(128)
    assert gone() is None and fresh.numel() == 128 and int(fresh.abs().sum()) == 0


def test_the_backing_is_the_one_allocation_behind_every_layer_view() -> None:
    buffer = torch.zeros(256, dtype=torch.int8)
    runner = _Runner()
    runner.kv_caches = [buffer[:128].view(2, 64), buffer[128:].view(2, 64)]  # type: ignore[attr-defined]
    backing = kv_cache_backing(runner)
    assert backing is not None and backing.data_ptr() == buffer.data_ptr() and backing.numel() == 256
    runner.kv_caches = [buffer[:128], torch.zeros(128, dtype=torch.int8)]  # type: ignore[attr-defined]
    assert kv_cache_backing(runner) is None  # two allocations: nothing to hand over as one
    assert kv_cache_backing(_Runner()) is None


def _config(kv_bytes: int | None) -> Any:
    return SimpleNamespace(cache_config=SimpleNamespace(kv_cache_memory_bytes=kv_bytes))


def test_the_old_kv_cache_stays_only_when_both_models_fix_the_same_size() -> None:
    assert kv_cache_size_fixed(_config(2**28), _config(2**28))
    assert not kv_cache_size_fixed(_config(2**28), _config(2**27))
    # Sized from free memory (or the worker's RSS on CPU): memory still held would shrink the new one.
    assert not kv_cache_size_fixed(_config(None), _config(None))
    assert not kv_cache_size_fixed(_config(None), _config(2**28))


def test_a_kept_kv_cache_is_handed_only_to_a_runner_whose_target_fixes_its_size() -> None:
    old = _Runner()
    buffer = torch.full((64,), 7, dtype=torch.int8)
    old.kv_caches = [buffer[:32], buffer[32:]]  # type: ignore[attr-defined]
    assert take_kv_cache(old, _config(None)) is None  # a size from free memory is never kept
    assert take_kv_cache(old, _config(64), target=_config(128)) is None  # a known target of another size
    kept = take_kv_cache(old, _config(64))
    assert kept is not None and kept.backing.data_ptr() == buffer.data_ptr()
    other = _Runner()
    hand_kv_cache(kept, other, _config(128))
    assert other.initialize_kv_cache_tensors(64).data_ptr() != buffer.data_ptr()
    same = _Runner()
    hand_kv_cache(kept, same, _config(64))
    reused = same.initialize_kv_cache_tensors(64)
    assert reused.data_ptr() == buffer.data_ptr() and int(reused.abs().sum()) == 0
