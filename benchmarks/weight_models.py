"""Realistic-size test models for the switch benchmark, and the floors a switch's weight transfer is held to.

The tiny demo models (0.4 M parameters) hide the cost that dominates real switches: the weights. This module
builds, once and cached, random float32 Llamas of about 1 GiB (two of one shape with different weights, one of
another shape) from tiny-plain's tokenizer, and measures in the calling process what moving that many bytes
costs at best: a memcpy, a read of the weight files from the page cache, and safetensors' ``get_tensor`` plus a
copy of every tensor into memory allocated beforehand (what a loader into existing parameters does).

On vLLM's CPU backend a load does one more thing no copy floor holds: it packs every linear layer's weight
for its GEMM (oneDNN's ``create_onednn_mm``), on CUDA or HPU there is no such step. That is a fourth figure,
the packing floor, measured as the engine's worker packs (glibc's heap settings of ``IN_PLACE_ENGINE_ENV``, the
previous packing freed first), so the in-place swaps can also be held to what the platform itself needs.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from server.tinymodels.spec import REPO_ROOT
from server.vllm_plugin.protocol import IN_PLACE_ENGINE_ENV

__all__ = [
    "CACHE_ENV",
    "OTHER_SHAPE",
    "SAME_SHAPE",
    "Floors",
    "LlamaShape",
    "WeightModel",
    "build_weight_models",
    "measure_floors",
    "packing_floor_ms",
]

#: Env var that moves the cache of the benchmark's models (about 3 GiB).
CACHE_ENV = "TURNOUT_WEIGHT_MODELS"
_STAMP = "turnout-weights.json"
#: Tokenizer and generation files copied from tiny-plain; the chat template comes from its tokenizer_config.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
#: A shard holds at most this many bytes, so a loader has several files to read (as real checkpoints do).
_SHARD_BYTES = 256 * 2**20


class LlamaShape(msgspec.Struct, frozen=True, kw_only=True):
    """The shape of one random Llama (head_dim 64, as vLLM's CPU attention wants)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int


#: ~1.0 GiB in float32 (268 M parameters): the two models of one architecture.
SAME_SHAPE = LlamaShape(hidden=1024, intermediate=4096, layers=16, heads=16, kv_heads=16)
#: ~0.97 GiB in float32, another architecture (width, depth, grouped-query attention).
OTHER_SHAPE = LlamaShape(hidden=1280, intermediate=5120, layers=11, heads=20, kv_heads=4)


class WeightModel(msgspec.Struct, frozen=True, kw_only=True):
    """One benchmark model: its served name, shape and weight seed."""

    name: str
    shape: LlamaShape
    seed: int


class Floors(msgspec.Struct, frozen=True, kw_only=True):
    """The floors for bringing one model's weights into memory, medians in milliseconds."""

    weight_bytes: int
    memcpy_ms: float
    page_cache_read_ms: float
    safetensors_copy_ms: float
    #: vLLM's CPU GEMM packing of every linear weight (None: not measured, or no oneDNN on this platform).
    cpu_gemm_packing_ms: float | None = None

    @property
    def cpu_load_ms(self) -> float | None:
        """The least a CPU load into existing parameters costs: the safetensors copy, then the packing."""
        if self.cpu_gemm_packing_ms is None:
            return None
        return round(self.safetensors_copy_ms + self.cpu_gemm_packing_ms, 1)


def default_cache_dir() -> Path:
    """``$TURNOUT_WEIGHT_MODELS`` if set, else ``<repo root>/.cache/weight-models``."""
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / ".cache" / "weight-models")


def build_weight_models(models: tuple[WeightModel, ...], cache_dir: Path, tokenizer_from: Path) -> dict[str, Path]:
    """Build each model into ``cache_dir/<name>`` unless a build of the same spec is there; returns the folders."""
    paths: dict[str, Path] = {}
    for model in models:
        dest = cache_dir / model.name
        stamp = msgspec.json.encode(model).decode()
        if not _stamp_matches(dest, stamp):
            print(f"building {model.name} ({_parameters(model.shape) * 4 / 2**30:.2f} GiB) in {dest}", flush=True)
            _build(model, dest, tokenizer_from, stamp)
        paths[model.name] = dest
    return paths


def _stamp_matches(dest: Path, stamp: str) -> bool:
    try:
        return (dest / _STAMP).read_text() == stamp
    except OSError:
        return False


def _parameters(shape: LlamaShape) -> int:
    head_dim = 64
    attention = 2 * shape.hidden * shape.heads * head_dim + 2 * shape.hidden * shape.kv_heads * head_dim
    mlp = 3 * shape.hidden * shape.intermediate
    return shape.layers * (attention + mlp + 2 * shape.hidden)


def _build(model: WeightModel, dest: Path, tokenizer_from: Path, stamp: str) -> None:
    """Random weights (std 0.02, so activations stay finite), written as sharded safetensors, then the stamp."""
    import torch
    from safetensors.torch import save_file

    shape = model.shape
    vocab = int(json.loads((tokenizer_from / "config.json").read_text())["vocab_size"])
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    generator = torch.Generator().manual_seed(model.seed)

    head_dim = 64
    # (name, size): matrices are random, the norms' vectors ones (as a freshly initialized Llama has them).
    tensors: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, shape.hidden))]
    for i in range(shape.layers):
        prefix = f"model.layers.{i}"
        q, kv = shape.heads * head_dim, shape.kv_heads * head_dim
        for name, rows, cols in (
            ("self_attn.q_proj", q, shape.hidden),
            ("self_attn.k_proj", kv, shape.hidden),
            ("self_attn.v_proj", kv, shape.hidden),
            ("self_attn.o_proj", shape.hidden, q),
            ("mlp.gate_proj", shape.intermediate, shape.hidden),
            ("mlp.up_proj", shape.intermediate, shape.hidden),
            ("mlp.down_proj", shape.hidden, shape.intermediate),
        ):
            tensors.append((f"{prefix}.{name}.weight", (rows, cols)))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors.append((f"{prefix}.{norm}.weight", (shape.hidden,)))
    tensors.append(("model.norm.weight", (shape.hidden,)))

    shards: list[dict[str, torch.Tensor]] = [{}]
    for name, size in tensors:
        tensor = torch.randn(*size, generator=generator) * 0.02 if len(size) == 2 else torch.ones(*size)
        if shards[-1] and sum(t.nbytes for t in shards[-1].values()) + tensor.nbytes > _SHARD_BYTES:
            shards.append({})
        shards[-1][name] = tensor
    weight_map: dict[str, str] = {}
    for index, shard in enumerate(shards, start=1):
        file = f"model-{index:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(dest / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
    total = sum(t.nbytes for shard in shards for t in shard.values())
    (dest / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
    )
    config = json.loads((tokenizer_from / "config.json").read_text())
    config.update(
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=head_dim,
        tie_word_embeddings=True,
    )
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    for name in _TOKENIZER_FILES:
        shutil.copy2(tokenizer_from / name, dest / name)
    (dest / _STAMP).write_text(stamp)  # last: a folder with a matching stamp is complete


def _weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def _median_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000.0)
    return round(statistics.median(times), 1)


def measure_floors(folder: Path, repeats: int = 3) -> Floors:
    """The three floors for the model in ``folder``, each a median of ``repeats`` after one warming pass."""
    files = _weight_files(folder)
    return Floors(
        weight_bytes=sum(f.stat().st_size for f in files),
        memcpy_ms=_memcpy_floor(sum(f.stat().st_size for f in files), repeats),
        page_cache_read_ms=_read_floor(files, repeats),
        safetensors_copy_ms=_safetensors_floor(files, repeats),
        cpu_gemm_packing_ms=_packing_floor_as_the_worker(folder, repeats),
    )


def _memcpy_floor(size: int, repeats: int) -> float:
    import torch

    source = torch.ones(size, dtype=torch.uint8)
    target = torch.empty_like(source)
    target.copy_(source)  # touch every page once: the floor is the copy, not the page faults
    return _median_ms(lambda: target.copy_(source), repeats)


def _read_floor(files: list[Path], repeats: int) -> float:
    buffer = bytearray(max(f.stat().st_size for f in files))

    def read_files() -> None:
        for file in files:
            with file.open("rb", buffering=0) as handle:
                handle.readinto(buffer)

    read_files()  # into the page cache
    return _median_ms(read_files, repeats)


def _safetensors_floor(files: list[Path], repeats: int) -> float:
    """``get_tensor`` and a copy into tensors allocated beforehand: what loading into existing parameters costs."""
    import torch
    from safetensors import safe_open

    destinations: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as shard:
            for key in shard.keys():  # noqa: SIM118 (safe_open has no __iter__)
                destinations[key] = torch.empty_like(shard.get_tensor(key))

    def copy_all() -> None:
        for file in files:
            with safe_open(str(file), framework="pt") as shard:
                for key in shard.keys():  # noqa: SIM118
                    destinations[key].copy_(shard.get_tensor(key))

    copy_all()
    return _median_ms(copy_all, repeats)


def _packing_floor_as_the_worker(folder: Path, repeats: int) -> float | None:
    """:func:`packing_floor_ms` in a fresh interpreter started with the worker's heap settings."""
    code = f"from benchmarks.weight_models import packing_floor_ms as f; print(f({str(folder)!r}, {repeats}))"
    env = {**os.environ, **IN_PLACE_ENGINE_ENV, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=900
    )
    last = done.stdout.strip().splitlines()[-1]
    return None if last == "None" else float(last)


def packing_floor_ms(folder: str | Path, repeats: int = 3) -> float | None:
    """vLLM's CPU GEMM packing of every linear weight of the model in ``folder``, from tensors in memory.

    Each weight's previous packing is freed just before it is packed again, as the worker's reload does
    (``weight_reuse.reusing_layer_buffers``). None where vLLM's CPU ops have no oneDNN.
    """
    from safetensors import safe_open
    from vllm import _custom_ops as ops

    if not ops._supports_onednn:
        return None
    weights = []
    for file in _weight_files(Path(folder)):
        with safe_open(str(file), framework="pt") as shard:
            for key in shard.keys():  # noqa: SIM118 (safe_open has no __iter__)
                if key.endswith("proj.weight"):  # the linear layers; norms and the embedding are not packed
                    weights.append(shard.get_tensor(key).clone())
    packed: list[object] = [None] * len(weights)

    def pack_all() -> None:
        for index, weight in enumerate(weights):
            packed[index] = None
            packed[index] = ops.create_onednn_mm(weight.t(), 32)

    pack_all()
    return _median_ms(pack_all, repeats)
