"""vLLM's engine flags on ``turnout serve``, parsed by vLLM's own ``AsyncEngineArgs`` parser."""

from __future__ import annotations

import pytest

from server.engine.runtime.vllm_flags import EngineFlagsInvalid, parse_engine_flags
from tests.fresh_python import fresh_python


def test_flags_anywhere_around_the_profile_become_defaults() -> None:
    flags = parse_engine_flags(["--max-model-len", "4096", "p.yaml", "--dtype", "float32", "--enforce-eager"])
    assert flags.positionals == ("p.yaml",)
    assert flags.defaults == {"max_model_len": 4096, "dtype": "float32", "enforce_eager": True}


def test_vllms_spelling_rules_and_value_types_apply() -> None:
    flags = parse_engine_flags(
        ["--max_num_batched_tokens=2k", "--kv-cache-memory-bytes", "16M", "--no-enable-prefix-caching", "p.yaml"]
    )
    assert flags.defaults == {
        "max_num_batched_tokens": 2000,
        "kv_cache_memory_bytes": 16 * 2**20,
        "enable_prefix_caching": False,
    }


def test_only_the_flags_given_come_back() -> None:
    # A flag equal to vLLM's default still counts: the operator chose it (and it disables KV budgeting).
    assert parse_engine_flags(["--gpu-memory-utilization", "0.92"]).defaults == {"gpu_memory_utilization": 0.92}


def test_an_unknown_flag_is_named_with_the_closest_known_one() -> None:
    with pytest.raises(EngineFlagsInvalid) as caught:
        parse_engine_flags(["p.yaml", "--max-model-lenn", "5"], own_options=["--port"])
    assert str(caught.value).startswith("unknown option --max-model-lenn; did you mean '--max-model-len'")
    with pytest.raises(EngineFlagsInvalid, match=r"unknown option --prot; did you mean '--port'"):
        parse_engine_flags(["--prot=8000"], own_options=["--port"])


def test_a_bad_value_names_the_flag() -> None:
    with pytest.raises(EngineFlagsInvalid, match=r"argument --max-model-len: invalid .* value: 'abc'"):
        parse_engine_flags(["--max-model-len", "abc"])
    with pytest.raises(EngineFlagsInvalid, match=r"argument --dtype: invalid choice: 'floaty'"):
        parse_engine_flags(["--dtype", "floaty"])


@pytest.mark.parametrize(("flag", "where"), [("--model", "'model' key"), ("--served-model-name", "name")])
def test_flags_that_name_one_model_are_refused(flag: str, where: str) -> None:
    with pytest.raises(EngineFlagsInvalid, match=rf"{flag} cannot be a default for every model; set .*{where}"):
        parse_engine_flags([flag, "x"])


def test_no_flags_import_nothing() -> None:
    code = (
        "import sys; from server.engine.runtime.vllm_flags import parse_engine_flags as p; "
        "print(p(['p.yaml']).positionals, 'vllm' in sys.modules)"
    )
    assert fresh_python(code) == "('p.yaml',) False"
