"""vLLM's engine configs built before any engine starts, the memory reading, and the start-up budget they feed.

These build real ``VllmConfig`` objects for the tiny models (vLLM reads their ``config.json``) but start no
engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from server.engine.factory import prepare_profile, with_engine_defaults
from server.engine.residency.kv_budget import ENGINE_OVERHEAD_BYTES
from server.engine.runtime.vllm_configs import (
    EngineConfigInvalid,
    build_engine_configs,
    model_shape,
    read_device_memory,
)
from server.engine.types.memory_plan import MemoryReading
from server.profiles.schema import ModelProfile, Profile, Switching
from server.vllm_plugin import close_kv_pool

MIB = 2**20


def natural_profile(tiny_models: dict[str, Path], **switching: object) -> Profile:
    """What a user writes first: two models with only ``model`` and ``max_model_len``."""
    return Profile(
        path="/p.yaml",
        default_model="tools",
        models={
            "tools": ModelProfile(model=str(tiny_models["tiny-tools"]), engine_args={"max_model_len": 1024}),
            "plain": ModelProfile(model=str(tiny_models["tiny-plain"]), engine_args={"max_model_len": 512}),
        },
        switching=Switching(**switching),  # type: ignore[arg-type]
    )


def test_a_bad_value_names_the_model_and_the_key(tiny_models: dict[str, Path]) -> None:
    models = {
        "good": ModelProfile(model=str(tiny_models["tiny-tools"]), engine_args={"max_model_len": 256}),
        "short": ModelProfile(model=str(tiny_models["tiny-tools"]), engine_args={"max_model_len": -5}),
        "long": ModelProfile(model=str(tiny_models["tiny-plain"]), engine_args={"max_model_len": 99999}),
    }
    with pytest.raises(EngineConfigInvalid) as caught:
        build_engine_configs(models)
    short, long = caught.value.problems
    assert short.startswith("model 'short': engine argument max_model_len=-5: ")
    assert "greater than or equal to -1" in short
    assert long.startswith("model 'long': engine argument max_model_len=99999: ")
    assert "max_position_embeddings=2048" in long


def tensor_bytes(folder: Path) -> int:
    """The checkpoint's tensors' bytes, read with safetensors itself (the file less its header)."""
    with safe_open(str(folder / "model.safetensors"), framework="pt") as file:
        return sum(file.get_tensor(key).nbytes for key in file.keys())  # noqa: SIM118 (safe_open has no iterator)


def test_the_shape_comes_from_the_resolved_config(tiny_models: dict[str, Path]) -> None:
    model = ModelProfile(model=str(tiny_models["tiny-tools"]), engine_args={"max_model_len": 1024, "dtype": "float32"})
    config = build_engine_configs({"tools": model})["tools"]
    shape = model_shape("tools", model, config)
    # 2 layers x 1 KV head x 64 x (key + value) x 4 bytes (float32).
    assert shape.kv_bytes_per_token == 1024
    assert shape.max_model_len == 1024
    assert shape.max_num_seqs == config.scheduler_config.max_num_seqs == 128  # vLLM's CPU default, resolved
    assert shape.budgeted and shape.explicit_kv_bytes is None
    assert shape.weight_bytes == tensor_bytes(tiny_models["tiny-tools"])  # stored in float32, loaded in float32


def test_weights_cast_to_a_narrower_dtype_count_at_their_new_size(tiny_models: dict[str, Path]) -> None:
    model = ModelProfile(model=str(tiny_models["tiny-tools"]), engine_args={"dtype": "bfloat16"})
    shape = model_shape("tools", model, build_engine_configs({"tools": model})["tools"])
    assert shape.weight_bytes == tensor_bytes(tiny_models["tiny-tools"]) // 2
    assert shape.kv_bytes_per_token == 512
    assert shape.max_model_len == 2048  # the model's own limit, as vLLM derives it


def test_cpu_memory_is_read_where_vllms_worker_reads_it() -> None:
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    reading = read_device_memory("cpu")
    assert reading is not None
    node = get_allowed_cpu_list()[0].numa_node
    assert reading.where == f"NUMA node {node}"
    assert reading.total_bytes == get_memory_node_info(node).total_memory
    assert 0 < reading.available_bytes <= reading.total_bytes
    assert read_device_memory("hpu") is None


def test_a_natural_profile_gets_every_kv_cache_sized(tiny_models: dict[str, Path]) -> None:
    prepared, plan = prepare_profile(natural_profile(tiny_models), device="cpu")
    assert plan is not None and plan.errors == []
    assert plan.strategy == "keep" and plan.budget_bytes is not None  # auto on CPU: residency by memory budget
    # The default budget is the pool: what is available less the reserve.
    assert plan.budget_bytes == plan.memory.available_bytes - plan.reserve_bytes
    assert plan.engine_overhead_bytes == ENGINE_OVERHEAD_BYTES["cpu"]
    decisions = {decision.model: decision for decision in plan.decisions}
    # auto dtype is bfloat16 on CPU: 512 bytes a token; 128 sequences of max_model_len at most.
    assert decisions["tools"].kv_cache_bytes == 1024 * 128 * 512 == 64 * MIB
    assert decisions["plain"].kv_cache_bytes == 512 * 128 * 512
    assert prepared.models["tools"].engine_args == {"max_model_len": 1024, "kv_cache_memory_bytes": 64 * MIB}
    assert prepared.models["plain"].engine_args["kv_cache_memory_bytes"] == 32 * MIB


def test_a_memory_budget_of_the_profile_drives_the_plan(tiny_models: dict[str, Path]) -> None:
    _, plan = prepare_profile(natural_profile(tiny_models, memory_budget="1060MiB"), device="cpu")
    assert plan is not None and plan.budget_bytes == 1060 * MIB
    # Each model is sized for itself within the budget: 1 GiB of engine and its weights leave about 35 MiB of the
    # 64 MiB that tools could use.
    tools = next(decision for decision in plan.decisions if decision.model == "tools")
    assert tools.footprint_bytes <= 1060 * MIB and not tools.capped_at_need
    assert 1060 * MIB - tools.footprint_bytes < 128 * 512  # at most one block short (128 tokens on CPU)


def test_the_kept_kv_pool_is_reserved_out_of_host_memory(tiny_models: dict[str, Path]) -> None:
    """The pool (tmpfs) is host memory: on CPU the engines and the default memory budget get that much less."""
    reading = MemoryReading(device="cpu", where="NUMA node 0", total_bytes=24 * 2**30, available_bytes=20 * 2**30)
    _, plain = prepare_profile(natural_profile(tiny_models), device="cpu", memory=reading)
    try:
        kept, plan = prepare_profile(
            natural_profile(tiny_models, kv_keep_bytes=2 * 2**30), device="cpu", memory=reading
        )
        assert kept.models["tools"].engine_args["kv_transfer_config"]["kv_connector"] == "TurnoutKVKeep"
    finally:
        close_kv_pool()
    assert plain is not None and plan is not None
    assert plan.reserve_bytes == plain.reserve_bytes + 2 * 2**30
    assert plain.budget_bytes is not None and plan.budget_bytes == plain.budget_bytes - 2 * 2**30


def test_a_profile_that_sets_its_cache_is_left_alone(tiny_models: dict[str, Path]) -> None:
    profile = natural_profile(tiny_models, strategy="stop")
    fixed = ModelProfile(model=profile.models["tools"].model, engine_args={"kv_cache_memory_bytes": 16 * MIB})
    profile = Profile(
        path=profile.path, default_model="tools", models={**profile.models, "tools": fixed}, switching=profile.switching
    )
    prepared, plan = prepare_profile(profile, device="cpu")
    assert plan is not None and plan.resident_together == 1
    assert prepared.models["tools"] is fixed
    assert [decision.source for decision in plan.decisions] == ["profile", "budget"]


def test_command_line_defaults_apply_under_each_models_own_keys(tiny_models: dict[str, Path]) -> None:
    profile = natural_profile(tiny_models)
    merged = with_engine_defaults(profile, {"max_model_len": 256, "dtype": "float32"})
    assert merged.models["tools"].engine_args == {"max_model_len": 1024, "dtype": "float32"}
    assert with_engine_defaults(profile, {}) is profile
    # A flag's bad value fails for every model that does not override it, and names each.
    with pytest.raises(EngineConfigInvalid) as caught:
        prepare_profile(natural_profile(tiny_models), engine_defaults={"max_num_seqs": 0}, device="cpu")
    assert [problem.split(":")[0] for problem in caught.value.problems] == ["model 'tools'", "model 'plain'"]
    assert "engine argument max_num_seqs=0" in caught.value.problems[0]


def test_a_models_generation_tasks_are_read_before_it_loads(tiny_models: dict[str, Path]) -> None:
    # What a form route checks before admission (issue 39): a chat model has no speech task, Whisper has.
    from server.engine.runtime.model_tasks import generation_tasks
    from server.tinymodels.speech import build_tiny_whisper

    chat = ModelProfile(model=str(tiny_models["tiny-plain"]), engine_args={"max_model_len": 512})
    assert generation_tasks("plain", chat) == frozenset({"generate"})
    whisper = ModelProfile(model=str(build_tiny_whisper()), engine_args={"max_model_len": 448})
    assert "transcription" in (generation_tasks("speech", whisper) or ())
    pooling = ModelProfile(model=str(tiny_models["tiny-plain"]), engine_args={"runner": "pooling", "convert": "embed"})
    assert generation_tasks("embed", pooling) == frozenset()
    assert generation_tasks("gone", ModelProfile(model="/nonexistent/model")) is None
