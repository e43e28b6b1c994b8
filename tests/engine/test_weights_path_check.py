"""Which targets may take the ``weights`` path of an in-place swap (``server/vllm_plugin/weights.py``).

Stand-in configs carry only the attributes the check reads; the real-engine side is
``tests/engine/test_in_place_engines.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from server.vllm_plugin.weights import incompatibility

_LLAMA = {"hidden_size": 128, "num_hidden_layers": 2, "vocab_size": 633, "rope_theta": 10000.0}


class _HfConfig:
    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)


def _config(*, hf: dict[str, Any] | None = None, **changes: Any) -> Any:
    from vllm.config import CompilationMode

    values: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "dtype": "torch.float32",
        "quantization": None,
        "runner_type": "generate",
        "model_impl": "auto",
        "tp": 1,
        "block_size": 128,
        "cache_dtype": "auto",
        "mode": CompilationMode.NONE,
        "load_format": "auto",
        "lora_config": None,
        **changes,
    }
    return SimpleNamespace(
        model_config=SimpleNamespace(
            architectures=values["architectures"],
            dtype=values["dtype"],
            quantization=values["quantization"],
            runner_type=values["runner_type"],
            model_impl=values["model_impl"],
            hf_text_config=_HfConfig({**_LLAMA, "_name_or_path": "/models/x", "eos_token_id": 2, **(hf or {})}),
        ),
        parallel_config=SimpleNamespace(
            tensor_parallel_size=values["tp"],
            pipeline_parallel_size=1,
            data_parallel_size=1,
            enable_expert_parallel=False,
        ),
        cache_config=SimpleNamespace(block_size=values["block_size"], cache_dtype=values["cache_dtype"]),
        compilation_config=SimpleNamespace(mode=values["mode"]),
        load_config=SimpleNamespace(load_format=values["load_format"]),
        lora_config=values["lora_config"],
        speculative_config=None,
    )


def test_a_fine_tune_of_the_same_base_takes_the_weights_path() -> None:
    # Another path and other special-token ids do not shape the model.
    target = _config(hf={"_name_or_path": "/models/y", "eos_token_id": 7, "bos_token_id": 1})
    assert incompatibility(_config(), target) is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"hf": {"hidden_size": 256}}, "hidden_size"),
        ({"hf": {"vocab_size": 469}}, "vocab_size"),
        ({"hf": {"rope_theta": 500000.0}}, "rope_theta"),  # a buffer built at construction, not a weight
        ({"dtype": "torch.bfloat16"}, "dtype"),
        ({"architectures": ["Qwen2ForCausalLM"]}, "architectures"),
        ({"tp": 2}, "tensor_parallel_size"),
        ({"block_size": 16}, "block_size"),
        ({"quantization": "fp8"}, "quantized"),
        ({"lora_config": object()}, "LoRA"),
        ({"load_format": "gguf"}, "load format"),
    ],
)
def test_anything_that_shapes_the_model_refuses_it(changes: dict[str, Any], reason: str) -> None:
    refused = incompatibility(_config(), _config(**changes))
    assert refused is not None and reason in refused, refused


def test_a_compiled_model_refuses_it() -> None:
    from vllm.config import CompilationMode

    refused = incompatibility(_config(mode=CompilationMode.VLLM_COMPILE), _config(mode=CompilationMode.VLLM_COMPILE))
    assert refused is not None and "compiled" in refused
