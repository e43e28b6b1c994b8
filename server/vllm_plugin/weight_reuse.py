"""Memory the ``weights`` path reuses instead of allocating anew: layer buffers, packed weights, the KV cache.

Profiled on the 1 GiB benchmark models (CPU, float32), a same-shape swap through vLLM's layer-wise reload spent
its time in the copies from the page cache and the CPU GEMM packing (both a fresh load pays too), made dearer
by first touches of fresh memory in three places:

- every layer's parameters are materialized in fresh memory (``torch.empty``: for a 32 MiB ``gate_up_proj``, an
  ``mmap`` whose pages fault in one by one while the checkpoint tensor is copied in);
- the CPU GEMM packs each weight into new memory (``create_onednn_mm``) while the old model's packed copy is
  still alive, so that memory cannot be reused either, and the peak holds both;
- the engine core allocates a new, zeroed KV cache of the same size as the one just dropped.

:func:`reusing_layer_buffers` gives the reload one buffer per tensor shape, handed from layer to layer (vLLM
materializes, loads, processes and copies back one layer at a time, so a buffer is free again once its layer is
done), and drops a layer's packed weight just before the new one is packed. :func:`keep_kv_cache` hands the old
KV cache's memory to the new runner when both models fix the same KV cache size (:func:`kv_cache_size_fixed`)
and the new layout needs exactly as many bytes; it is zeroed, as a fresh allocation is, so nothing the old
model wrote survives (the scheduler, its block pool and prefix cache are new in any case). A full in-place
load (another architecture) keeps the KV cache the same way (``worker.turnout_unload_model(load_follows=True)``).

The packing's own new memory is reused through glibc (``IN_PLACE_ENGINE_ENV`` in ``protocol.py``): with its
default settings every allocation over 32 MiB was a fresh ``mmap``, so even the memory freed just before was
faulted in again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

__all__ = [
    "KeptKvCache",
    "hand_kv_cache",
    "keep_kv_cache",
    "kv_cache_backing",
    "kv_cache_size_fixed",
    "reusing_layer_buffers",
    "take_kv_cache",
]


class _BufferPool:
    """Tensors of the layer being loaded, reused for the next layer with the same shape, stride and dtype."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], list[Any]] = {}

    def take(self, meta_tensor: Any) -> Any:
        """A real tensor for ``meta_tensor`` (its class and attributes too), from the pool when one is free."""
        import torch

        key = (tuple(meta_tensor.size()), tuple(meta_tensor.stride()), meta_tensor.dtype)
        candidates = self._buffers.setdefault(key, [])
        buffer = next((b for b in candidates if _unshared(b)), None)
        if buffer is None:
            buffer = torch.empty_strided(key[0], key[1], dtype=key[2], requires_grad=False)
            candidates.append(buffer)
        # A new tensor object on the buffer's storage: the pool can tell by the storage's use count when the
        # layer (or whatever its processing kept, e.g. a GEMM that wraps the weight) lets go of it.
        tensor = buffer.as_strided(key[0], key[1])
        tensor.__class__ = meta_tensor.__class__
        tensor.__dict__ = meta_tensor.__dict__.copy()
        return tensor


def _unshared(buffer: Any) -> bool:
    """True when only the pool holds ``buffer``'s storage (the 2: the buffer, the storage object asked for)."""
    import torch

    return int(torch._C._storage_Use_Count(buffer.untyped_storage()._cdata)) <= 2


@contextlib.contextmanager
def reusing_layer_buffers() -> Iterator[None]:
    """While active, vLLM's layer-wise reload materializes layers from a :class:`_BufferPool`.

    It also drops a layer's CPU GEMM closure (which holds its packed weight) before the layer is processed
    again, so the new packed weight can take the old one's memory. Written against vLLM 0.32.0's
    ``reload.layerwise`` (the plugin refuses other versions); the pool and its memory go on exit.

    (Processing complete layers on a helper thread while the loader reads on was tried: on 2 cores both the
    copies and the packing already run on every core, and no gain showed beyond the noise.)
    """
    from vllm.model_executor.model_loader.reload import layerwise as layerwise_module
    from vllm.model_executor.model_loader.reload import meta
    from vllm.model_executor.model_loader.reload.utils import get_layer_tensors

    layerwise: Any = layerwise_module  # its materialize_layer is vLLM's import, not an export of the module
    pool = _BufferPool()
    original: Callable[[Any, Any], None] = layerwise.materialize_layer

    def materialize_layer(layer: Any, info: Any) -> None:
        if layer.__class__.__name__ in meta.SKIP_MODULES:
            return
        if "cpu_linear" in layer.__dict__:
            # The packed weight of the old model; the layer's processing (next) packs the new one.
            del layer.__dict__["cpu_linear"]
        with info.restore_device:
            for name, tensor in get_layer_tensors(layer).items():
                if name not in meta.SKIP_TENSORS and tensor.is_meta:
                    setattr(layer, name, pool.take(tensor))

    layerwise.materialize_layer = materialize_layer
    try:
        yield
    finally:
        layerwise.materialize_layer = original


class KeptKvCache(NamedTuple):
    """A dropped runner's KV cache allocation, and the ``VllmConfig`` that sized it."""

    config: Any
    backing: Any


def take_kv_cache(runner: Any, config: Any, target: Any | None = None) -> KeptKvCache | None:
    """``runner``'s KV cache allocation (its ``config``'s), kept for the next runner; None when it cannot serve one.

    None when ``config`` fixes no size, or ``target`` (when already known) fixes another: its memory then goes
    with the runner.
    """
    if config.cache_config.kv_cache_memory_bytes is None:
        return None
    if target is not None and not kv_cache_size_fixed(config, target):
        return None
    backing = kv_cache_backing(runner)
    return None if backing is None else KeptKvCache(config, backing)


def hand_kv_cache(kept: KeptKvCache | None, runner: Any, target: Any) -> None:
    """Have ``runner`` (built for ``target``) allocate its KV cache in ``kept`` when both fix the same size.

    Otherwise nothing: ``kept``'s memory goes when the caller drops it (before the model loads).
    """
    if kept is not None and kv_cache_size_fixed(kept.config, target):
        keep_kv_cache(runner, kept.backing)


def kv_cache_size_fixed(current: Any, target: Any) -> bool:
    """Whether both ``VllmConfig`` objects fix the KV cache at the same size (``kv_cache_memory_bytes``).

    Only then may the old KV cache stay until the new one is allocated: a size vLLM derives from the free
    memory (or, on CPU, from the worker's RSS) would come out smaller by the memory still held.
    """
    size = target.cache_config.kv_cache_memory_bytes
    return size is not None and size == current.cache_config.kv_cache_memory_bytes


def kv_cache_backing(runner: Any) -> Any:
    """The one int8 allocation behind ``runner``'s KV cache views, or None (no KV cache, or not one block)."""
    import torch

    caches = [c for c in getattr(runner, "kv_caches", None) or () if isinstance(c, torch.Tensor)]
    if not caches:
        return None
    storage = caches[0].untyped_storage()
    if any(c.untyped_storage().data_ptr() != storage.data_ptr() for c in caches):
        return None
    return torch.empty(0, dtype=torch.int8, device=caches[0].device).set_(storage)


def keep_kv_cache(runner: Any, backing: Any) -> None:
    """Have ``runner``'s next KV cache allocation take ``backing`` (zeroed) when it asks for as many bytes.

    A no-op for a ``backing`` of None or a runner without vLLM's ``initialize_kv_cache_tensors``.

    vLLM allocates the KV cache as one ``torch.zeros(size, dtype=int8)`` (``v1.worker.utils.allocate_kv_cache``)
    and views it per layer; this intercepts exactly that call, once, for this runner only. Any other size or
    dtype allocates as usual and ``backing`` is freed.
    """
    from torch.overrides import TorchFunctionMode

    allocate = getattr(runner, "initialize_kv_cache_tensors", None)
    if allocate is None or backing is None:
        return
    kept = [backing]

    class _KeptZeros(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            import torch

            kwargs = kwargs or {}
            if func is torch.zeros and kept and kwargs.get("dtype") == torch.int8:
                if _asks_for(args, kwargs, kept[0]):
                    return kept.pop().zero_()
                kept.clear()  # another size: the old memory goes before the new is allocated
            return func(*args, **kwargs)

    def initialize_kv_cache_tensors(*args: Any, **kwargs: Any) -> Any:
        del runner.initialize_kv_cache_tensors  # once: later calls are vLLM's own again
        try:
            with _KeptZeros():
                return allocate(*args, **kwargs)
        finally:
            kept.clear()

    runner.initialize_kv_cache_tensors = initialize_kv_cache_tensors


def _asks_for(args: tuple[Any, ...], kwargs: dict[str, Any], backing: Any) -> bool:
    """Whether a ``torch.zeros`` call asks for a 1-D int8 tensor of ``backing``'s size on its device."""
    import torch

    size = args[0] if len(args) == 1 else kwargs.get("size")
    if isinstance(size, list | tuple) and len(size) == 1:
        size = size[0]
    device = torch.device(kwargs.get("device") or "cpu")
    return (
        isinstance(size, int)
        and size == backing.numel()
        and kwargs.get("dtype") == torch.int8
        and device.type == backing.device.type
    )
