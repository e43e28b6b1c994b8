"""A tiny LoRA adapter for a tiny Llama, written without PEFT: ``adapter_config.json`` + ``adapter_model.safetensors``.

The adapter's weights are seeded random and large (B is not zero, unlike a freshly initialized PEFT adapter),
so the adapted model's greedy answer differs from its base's: a test that gets the base's answer back for the
adapter's name knows the adapter was not applied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

__all__ = ["LORA_RANK", "LORA_TARGETS", "build_tiny_lora"]

#: The adapter's rank (vLLM's default ``max_lora_rank`` is 16).
LORA_RANK: Final = 8
#: The attention projections the adapter changes, in every layer.
LORA_TARGETS: Final = ("q_proj", "v_proj", "o_proj")
#: How strongly the adapter moves the projections (its weights' standard deviation).
_SCALE: Final = 0.5


def build_tiny_lora(base: Path, dest: Path, *, seed: int = 0) -> Path:
    """Write a LoRA adapter for the Llama model folder ``base`` into ``dest`` (created) and return ``dest``.

    Args:
        base: A Llama model folder (its ``config.json`` gives the layer count and projection sizes).
        dest: The adapter folder to write.
        seed: Seeds the weights; two adapters with different seeds answer differently.
    """
    import torch
    from safetensors.torch import save_file

    config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    hidden = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or hidden // int(config["num_attention_heads"]))
    kv_width = int(config["num_key_value_heads"]) * head_dim
    # (input features, output features) of each target, as the Llama attention block has them.
    shapes = {"q_proj": (hidden, hidden), "v_proj": (hidden, kv_width), "o_proj": (hidden, hidden)}
    generator = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for layer in range(int(config["num_hidden_layers"])):
        for target in LORA_TARGETS:
            inputs, outputs = shapes[target]
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(LORA_RANK, inputs, generator=generator) * _SCALE
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(outputs, LORA_RANK, generator=generator) * _SCALE
    dest.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dest / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base),
        "r": LORA_RANK,
        "lora_alpha": 2 * LORA_RANK,
        "lora_dropout": 0.0,
        "target_modules": list(LORA_TARGETS),
        "bias": "none",
        "fan_in_fan_out": False,
    }
    (dest / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2), encoding="utf-8")
    return dest
