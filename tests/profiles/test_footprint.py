"""Footprints from the checkpoint's safetensors headers and config.json, before any engine (no vLLM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from server.profiles.checkpoint_size import checkpoint_weight_bytes
from server.profiles.footprint import (
    DEFAULT_BLOCK_SIZE,
    ENGINE_OVERHEAD_BYTES,
    FootprintUnknown,
    kv_bytes_per_token,
    model_footprint,
)
from server.profiles.schema import ModelProfile

MIB = 2**20
#: A Llama-shaped config: 4 layers, 2 KV heads of 32.
CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 4,
    "max_position_embeddings": 4096,
}


def checkpoint(folder: Path, tensors: dict[str, torch.Tensor], **config: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**CONFIG, **config}))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def footprint(folder: Path, platform: str = "cpu", **engine_args: Any) -> Any:
    model = ModelProfile(model=str(folder), engine_args=engine_args)
    return model_footprint("m", model, platform=platform, env={"HOME": str(folder)})


def test_a_float32_checkpoint_counts_four_bytes_an_element(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "f32", {"a": torch.zeros(256, 128), "b": torch.zeros(64)}, dtype="float32")
    item = footprint(folder, max_model_len=1024, max_num_seqs=8)
    assert item.weight_bytes == (256 * 128 + 64) * 4
    # float32 KV: 2 (key, value) x 4 layers x 2 heads x 32 x 4 bytes = 2 KiB a token.
    assert item.kv_bytes_per_token == 2 * 4 * 2 * 32 * 4 == 2048
    assert item.kv_cache_bytes == 1024 * 8 * 2048 and item.kv_source == "need"
    assert item.overhead_bytes == ENGINE_OVERHEAD_BYTES["cpu"]
    assert item.total_bytes == item.weight_bytes + item.kv_cache_bytes + item.overhead_bytes


def test_a_cast_to_another_float_width_is_counted_at_that_width(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "f32", {"a": torch.zeros(256, 128)}, dtype="float32")
    item = footprint(folder, dtype="bfloat16", max_model_len=1024, max_num_seqs=1)
    assert item.weight_bytes == 256 * 128 * 2
    assert item.kv_bytes_per_token == 1024  # the KV cache follows the model's dtype


def test_a_bfloat16_checkpoint_and_the_defaults_vllm_would_resolve(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "bf16", {"a": torch.zeros(300, 100, dtype=torch.bfloat16)}, dtype="bfloat16")
    item = footprint(folder)
    assert item.weight_bytes == 300 * 100 * 2
    assert item.max_model_len == 4096 and item.max_num_seqs == 128  # config.json, vLLM's CPU default
    assert item.kv_cache_bytes == 4096 * 128 * 1024
    assert footprint(folder, platform="cuda").max_num_seqs == 256


def test_a_quantized_checkpoint_counts_its_packed_tensors_as_stored(tmp_path: Path) -> None:
    tensors = {
        "qweight": torch.zeros(128, 16, dtype=torch.int32),  # eight 4-bit values per int32
        "scales": torch.zeros(4, 128, dtype=torch.float16),
        "qzeros": torch.zeros(4, 16, dtype=torch.int32),
        "fp8": torch.zeros(64, 64, dtype=torch.float8_e4m3fn),
        "u8": torch.zeros(32, dtype=torch.uint8),
    }
    quant = {"quant_method": "gptq", "bits": 4}
    folder = checkpoint(tmp_path / "q", tensors, dtype="float16", quantization_config=quant)
    stored = 128 * 16 * 4 + 4 * 128 * 2 + 4 * 16 * 4 + 64 * 64 + 32
    assert footprint(folder, max_model_len=256, max_num_seqs=1).weight_bytes == stored
    # A dtype given for the model does not widen the scales of a quantized checkpoint.
    assert footprint(folder, dtype="float32", max_model_len=256, max_num_seqs=1).weight_bytes == stored


def test_a_sharded_checkpoint_counts_only_the_files_its_index_names(tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    save_file({"a": torch.zeros(100)}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.zeros(50)}, str(folder / "model-00002-of-00002.safetensors"))
    save_file({"a": torch.zeros(100), "b": torch.zeros(50)}, str(folder / "consolidated.safetensors"))
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert checkpoint_weight_bytes(folder) == 150 * 4


def test_a_profiles_own_kv_cache_size_wins_and_block_rounding_counts(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "m", {"a": torch.zeros(8)}, dtype="float32")
    assert footprint(folder, kv_cache_memory_bytes=7 * MIB).kv_cache_bytes == 7 * MIB
    assert footprint(folder, kv_cache_memory_bytes=7 * MIB).kv_source == "profile"
    odd = footprint(folder, max_model_len=DEFAULT_BLOCK_SIZE + 1, max_num_seqs=1)
    assert odd.kv_cache_bytes == 2 * DEFAULT_BLOCK_SIZE * 2048  # a sequence takes whole blocks


def test_mla_keeps_one_latent_vector_a_layer(tmp_path: Path) -> None:
    folder = checkpoint(
        tmp_path / "mla", {"a": torch.zeros(8)}, dtype="bfloat16", kv_lora_rank=512, qk_rope_head_dim=64
    )
    per_token = kv_bytes_per_token(num_layers=4, num_kv_heads=1, head_size=576, dtype_bytes=2, mla=True)
    assert footprint(folder).kv_bytes_per_token == per_token == 4 * 576 * 2


def test_an_fp8_kv_cache_takes_one_byte_an_element(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "m", {"a": torch.zeros(8)}, dtype="bfloat16")
    assert footprint(folder, kv_cache_dtype="fp8_e4m3").kv_bytes_per_token == 2 * 4 * 2 * 32


def test_a_header_longer_than_its_file_is_refused_without_reading_on(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "bad", {"a": torch.zeros(8)})
    (folder / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    with pytest.raises(FootprintUnknown, match="header length 1000000000000 does not fit"):
        footprint(folder)


def test_a_model_neither_local_nor_cached_has_no_footprint(tmp_path: Path) -> None:
    model = ModelProfile(model="org/absent")
    with pytest.raises(FootprintUnknown, match="neither a local folder nor in the local cache"):
        model_footprint("m", model, platform="cpu", env={"HF_HUB_CACHE": str(tmp_path)})


def test_a_hub_id_is_read_from_the_local_cache(tmp_path: Path) -> None:
    entry = tmp_path / "models--org--tiny"
    checkpoint(entry / "snapshots" / "abc", {"a": torch.zeros(10)}, dtype="float32")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("abc")
    item = model_footprint("m", ModelProfile(model="org/tiny"), platform="cpu", env={"HF_HUB_CACHE": str(tmp_path)})
    assert item.weight_bytes == 40
