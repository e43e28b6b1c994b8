"""vLLM's AsyncEngineArgs fields, read from source, and the lenient value checks."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from server.profiles.engine_args import check_engine_arg, did_you_mean
from server.profiles.vllm_source import engine_arg_fields


def test_fields_include_inherited_and_own_fields() -> None:
    fields = engine_arg_fields()

    assert fields is not None
    assert fields["max_model_len"] == "int"  # EngineArgs
    assert fields["enable_log_requests"] == "bool"  # AsyncEngineArgs' own
    assert "model" in fields
    assert len(fields) > 100


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
