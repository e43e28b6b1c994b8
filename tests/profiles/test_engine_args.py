"""vLLM's AsyncEngineArgs fields, read from source, and the lenient value checks."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
import typing
from typing import Any

import pytest

from server.profiles.engine_args import check_engine_arg, check_engine_value, did_you_mean
from server.profiles.vllm_source import EngineArgField, engine_arg_fields, vllm_package_dir
from tests.fakes.engine_args import RECORDED_ENGINE_ARG_FIELDS

needs_vllm = pytest.mark.skipif(vllm_package_dir() is None, reason="reads the installed vLLM's source")


@needs_vllm
def test_fields_include_inherited_and_own_fields() -> None:
    fields = engine_arg_fields()

    assert fields is not None
    assert fields["max_model_len"].annotation == "int"  # EngineArgs
    assert fields["enable_log_requests"].annotation == "bool"  # AsyncEngineArgs' own
    assert "model" in fields
    assert len(fields) > 100


@needs_vllm
def test_the_recording_the_profiles_tests_use_is_the_installed_vllms() -> None:
    # When this fails after a vLLM upgrade, record the fields again (tests/fakes/engine_args.py says how).
    fields = engine_arg_fields()
    assert fields is not None
    assert {name: fields[name] for name in fields} == dict(RECORDED_ENGINE_ARG_FIELDS)


@needs_vllm
def test_importing_profiles_and_reading_fields_pulls_in_neither_vllm_nor_torch_nor_litestar() -> None:
    # A fast `turnout validate` depends on it (tests/test_layers.py holds the import direction).
    code = (
        "import sys\n"
        "from server.profiles import validate_profile\n"
        "from server.profiles.vllm_source import engine_arg_fields, source_parser_registry\n"
        "assert engine_arg_fields() and source_parser_registry()\n"
        "loaded = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(loaded & {'vllm', 'torch', 'litestar', 'transformers'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "[]"


def test_did_you_mean() -> None:
    assert did_you_mean("max_modle_len", ["max_model_len", "dtype"]) == "; did you mean 'max_model_len'?"
    assert did_you_mean("zzz", ["max_model_len", "dtype"]) == ""


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (4096, "int", None),
        ("4096", "int", None),
        (4096.0, "int", None),
        (None, "int", None),
        (True, "int", "an integer"),
        ("32k", "int", "an integer"),
        ([1], "int | None", "an integer"),
        (0.9, "float", None),
        (1, "float", None),
        ("high", "float", "a number"),
        (True, "bool", None),
        ("yes", "bool", None),
        (2, "bool", "true or false"),
        ("maybe", "bool | None", "true or false"),
        ("x", "str", None),
        (5, "str | None", "a string"),
        ([1], "str | list[str] | None", None),  # anything richer is vLLM's to check
        ("anything", "ModelDType", None),
    ],
)
def test_lenient_value_checks(value: Any, annotation: str, expected: str | None) -> None:
    assert check_engine_arg(value, annotation) == expected


@needs_vllm
def test_bounds_and_choices_come_from_where_vllm_declares_them() -> None:
    fields = engine_arg_fields()
    assert fields is not None
    # The default mirrors the config field: `max_model_len: int = ModelConfig.max_model_len`.
    assert fields["max_model_len"].config_field == "ModelConfig.max_model_len"
    assert fields["max_model_len"].bounds == (("ge", -1),)
    # No default to follow: the config constructor in create_engine_config routes it.
    assert fields["max_num_seqs"].config_field == "SchedulerConfig.max_num_seqs"
    assert fields["max_num_seqs"].bounds == (("ge", 1),)
    # A Literal alias imported from vllm.config.model, followed to its values.
    assert fields["dtype"].choices == ("auto", "half", "float16", "bfloat16", "float", "float32")
    # `RunnerOption = Literal["auto", RunnerType]`, RunnerType imported from another module.
    assert fields["runner"].choices is not None and {"auto", "generate", "pooling"} <= set(fields["runner"].choices)
    assert fields["tokenizer_mode"].choices is None  # `TokenizerMode | str` allows any string


def _live_choices(hint: Any) -> tuple[Any, ...] | None:
    """The values a Literal-only type hint allows (None when it allows anything else)."""
    if typing.get_origin(hint) is typing.Literal:
        values: list[Any] = []
        for arg in typing.get_args(hint):
            inner = _live_choices(arg) if typing.get_origin(arg) is typing.Literal else (arg,)
            if inner is None:
                return None
            values.extend(inner)
        return tuple(values)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        parts = [_live_choices(arg) for arg in typing.get_args(hint) if arg is not type(None)]
        return None if any(part is None for part in parts) else tuple(v for part in parts for v in part or ())
    return None


@needs_vllm
def test_the_offline_table_matches_vllms_live_engine_args() -> None:
    """Read from source without importing vLLM, the table must say what the imported classes say."""
    import vllm.config
    from vllm.engine.arg_utils import AsyncEngineArgs

    fields = engine_arg_fields()
    assert fields is not None
    live = {field.name: field for field in dataclasses.fields(AsyncEngineArgs)}
    assert set(fields) == set(live)
    with_bounds = with_choices = 0
    for name in fields:
        offline = fields[name]
        if offline.config_field is not None:
            cls_name, attr = offline.config_field.split(".")
            info = getattr(vllm.config, cls_name).__pydantic_fields__[attr]
            declared = {
                (key, getattr(meta, key))
                for meta in info.metadata
                for key in ("gt", "ge", "lt", "le")
                if getattr(meta, key, None) is not None
            }
            assert set(offline.bounds) == declared, name
            with_bounds += bool(declared)
        expected = _live_choices(live[name].type) if not isinstance(live[name].type, str) else None
        assert offline.choices == expected, name
        with_choices += expected is not None
    assert with_bounds >= 20 and with_choices >= 20  # the comparison did compare something


_MAX_LEN = EngineArgField(
    name="max_model_len", annotation="int", config_field="ModelConfig.max_model_len", bounds=(("ge", -1),)
)
_UTILIZATION = EngineArgField(
    name="gpu_memory_utilization",
    annotation="float",
    config_field="CacheConfig.gpu_memory_utilization",
    bounds=(("gt", 0), ("le", 1)),
)
_DTYPE = EngineArgField(name="dtype", annotation="ModelDType", choices=("auto", "bfloat16", "float32"))


@pytest.mark.parametrize(
    ("value", "field", "expected"),
    [
        (-1, _MAX_LEN, None),
        (4096, _MAX_LEN, None),
        ("-5", _MAX_LEN, ("an integer >= -1", "ModelConfig.max_model_len: Field(ge=-1)")),
        (-5, _MAX_LEN, ("an integer >= -1", "ModelConfig.max_model_len: Field(ge=-1)")),
        ("4k", _MAX_LEN, ("an integer", "AsyncEngineArgs.max_model_len is int")),
        (None, _MAX_LEN, None),
        (1, _UTILIZATION, None),
        (0, _UTILIZATION, ("a number > 0 and <= 1", "CacheConfig.gpu_memory_utilization: Field(gt=0, le=1)")),
        (1.5, _UTILIZATION, ("a number > 0 and <= 1", "CacheConfig.gpu_memory_utilization: Field(gt=0, le=1)")),
        ("float32", _DTYPE, None),
        ("floaty", _DTYPE, ("one of 'auto', 'bfloat16', 'float32'", "AsyncEngineArgs.dtype is ModelDType")),
        (32, _DTYPE, ("one of 'auto', 'bfloat16', 'float32'", "AsyncEngineArgs.dtype is ModelDType")),
    ],
)
def test_values_against_vllms_declarations(value: Any, field: EngineArgField, expected: tuple[str, str] | None) -> None:
    assert check_engine_value(value, field) == expected
