"""The real in-place swap's own checks, without an engine: which pairs it refuses, and a loaded-model mismatch.

The fake swap (``tests/fakes/in_place.py``) raises a mismatch by itself; these test the code that production
runs (``server/engine/runtime/in_place_swap.py``). Each was shown to fail with its check broken on purpose.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from server.engine.runtime.in_place_swap import (
    LoadedModelMismatch,
    TargetConfig,
    _expect,
    describe_incompatibility,
    profile_incompatibility,
)
from server.profiles.schema import ModelProfile
from server.vllm_plugin.kv_keep_core import CONNECTOR_NAME as KEPT_KV_CONNECTOR
from server.vllm_plugin.protocol import WORKER_EXTENSION, LoadedModel


def _config(**changes: Any) -> SimpleNamespace:
    """A ``VllmConfig`` with the parts the check reads; ``changes`` overrides them by dotted name."""
    values: dict[str, Any] = {
        "parallel_config.tensor_parallel_size": 1,
        "parallel_config.pipeline_parallel_size": 1,
        "parallel_config.data_parallel_size": 1,
        "parallel_config.distributed_executor_backend": "uni",
        "parallel_config.worker_cls": "auto",
        "parallel_config.worker_extension_cls": WORKER_EXTENSION,
        "device_config.device_type": "cpu",
        "scheduler_config.async_scheduling": False,
        "model_config.enable_sleep_mode": False,
        "kv_transfer_config": None,
        "ec_transfer_config": None,
    }
    values.update(changes)
    config = SimpleNamespace()
    for dotted, value in values.items():
        holder = config
        *parents, leaf = dotted.split(".")
        for part in parents:
            if not hasattr(holder, part):
                setattr(holder, part, SimpleNamespace())
            holder = getattr(holder, part)
        setattr(holder, leaf, value)
    return config


def test_a_pair_of_the_same_layout_can_swap_in_place() -> None:
    assert describe_incompatibility(_config(), _config()) is None


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("parallel_config.tensor_parallel_size", 2, "tensor_parallel_size differs (1 -> 2)"),
        ("parallel_config.pipeline_parallel_size", 2, "pipeline_parallel_size differs (1 -> 2)"),
        ("parallel_config.data_parallel_size", 2, "data_parallel_size differs (1 -> 2)"),
        ("parallel_config.distributed_executor_backend", "mp", "distributed_executor_backend differs (uni -> mp)"),
        ("parallel_config.worker_cls", "x.Worker", "worker_cls differs (auto -> x.Worker)"),
        ("device_config.device_type", "cuda", "device differs (cpu -> cuda)"),
        ("scheduler_config.async_scheduling", True, "async_scheduling differs (False -> True)"),
        ("model_config.enable_sleep_mode", True, "enable_sleep_mode differs (False -> True)"),
        ("parallel_config.worker_extension_cls", "other.Extension", "worker_extension_cls is 'other.Extension'"),
        ("kv_transfer_config", object(), "a KV or encoder-cache transfer connector is configured"),
        ("ec_transfer_config", object(), "a KV or encoder-cache transfer connector is configured"),
    ],
)
def test_each_part_the_running_processes_fix_rules_the_swap_out(key: str, value: Any, reason: str) -> None:
    described = describe_incompatibility(_config(), _config(**{key: value}))
    assert described is not None and described.startswith(reason)


def test_turnouts_kept_kv_connector_swaps_in_place_only_on_both_sides() -> None:
    kept = SimpleNamespace(kv_connector=KEPT_KV_CONNECTOR)
    assert describe_incompatibility(_config(kv_transfer_config=kept), _config(kv_transfer_config=kept)) is None
    off_to_kept = describe_incompatibility(_config(), _config(kv_transfer_config=kept))
    assert off_to_kept == f"the KV connector differs (None -> {KEPT_KV_CONNECTOR})"
    other = SimpleNamespace(kv_connector="OffloadingConnector")
    described = describe_incompatibility(_config(kv_transfer_config=other), _config(kv_transfer_config=other))
    assert described == "a KV or encoder-cache transfer connector is configured"


def test_another_quant_config_needs_new_processes() -> None:
    plain, quantized = ModelProfile(model="/m"), ModelProfile(model="/m", quant_config="/q.json")
    assert profile_incompatibility(plain, quantized) == "quant_config differs"
    assert profile_incompatibility(quantized, quantized) is None


def _target(model: str = "/models/b", served: str = "b") -> TargetConfig:
    return TargetConfig(profile=ModelProfile(model=model), payload=b"", model=model, served_model_name=served)


def test_the_loaded_model_must_be_the_target() -> None:
    _expect(_target(), LoadedModel(model="/models/b", served_model_name="b"))
    with pytest.raises(LoadedModelMismatch, match=r"reports 'a' \(/models/a\) loaded, not 'b' \(/models/b\)"):
        _expect(_target(), LoadedModel(model="/models/a", served_model_name="a"))
    with pytest.raises(LoadedModelMismatch):  # the right weights under another name are still a mismatch
        _expect(_target(), LoadedModel(model="/models/b", served_model_name="a"))
    with pytest.raises(LoadedModelMismatch):
        _expect(_target(), LoadedModel(model="/models/a", served_model_name="b"))
