"""Reading profile files: bad YAML, bad bytes, odd YAML features, positions in JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from server.profiles import validate_profile
from server.profiles.yaml_tree import MAX_BYTES, MAX_FLOW_DEPTH
from server.profiles.yaml_values import MAX_DEPTH, MAX_VALUES
from tests.profiles.conftest import Check, where


def check_bytes(workspace: Path, data: bytes, env: dict[str, str]) -> list[str]:
    path = workspace / "raw.yaml"
    path.write_bytes(data)
    return where(validate_profile(path, env=env))


def test_syntax_error_points_at_the_problem(check: Check) -> None:
    assert where(check("models:\n  a: {model: models/tiny\n")) == [
        "3:1: invalid YAML: expected ',' or '}', but got '<stream end>' (while parsing a flow mapping that "
        "starts at line 2, column 6)"
    ]


def test_bad_indentation(check: Check) -> None:
    assert where(check("models:\n  a:\n    model: x\n   dtype: y\n")) == [
        "4:4: invalid YAML: expected <block end>, but found '<block mapping start>' (while parsing a block "
        "mapping that starts at line 2, column 3)"
    ]


def test_tab_indentation_gets_a_hint(check: Check) -> None:
    assert where(check("models:\n\ta: {model: models/tiny}\n")) == [
        "2:1: invalid YAML: found character '\\t' that cannot start any token (while scanning for the next "
        "token); indent with spaces, not tabs"
    ]


def test_bytes_that_are_not_utf8(workspace: Path, env: dict[str, str]) -> None:
    assert check_bytes(workspace, b"models:\n  a: {model: \xc3\xa9\xff}\n", env) == [
        "2:15: the profile is not UTF-8 text: byte 0xff cannot be decoded"
    ]


def test_control_characters(workspace: Path, env: dict[str, str]) -> None:
    assert check_bytes(workspace, b"models:\n  a: {model: x\x07}\n", env) == [
        "2:15: invalid YAML: the character #x07 is not allowed"
    ]


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_byte_order_marks(workspace: Path, env: dict[str, str], encoding: str) -> None:
    assert check_bytes(workspace, "models: {a: {model: models/tiny}}\n".encode(encoding), env) == []


def test_json_gets_positions_too(check: Check) -> None:
    text = '{\n  "models": {\n    "a": {"model": "models/tiny", "max_modle_len": 1}\n  },\n  "extra": 1\n}\n'

    assert where(check(text, name="p.json")) == [
        "3:35: model 'a': unknown key 'max_modle_len': not a model setting nor a field of vLLM's "
        "AsyncEngineArgs; did you mean 'max_model_len'?",
        "5:3: unknown top-level key 'extra' (allowed: default_model, models, switching, server)",
    ]


def test_invalid_json(check: Check) -> None:
    text = json.dumps({"models": {"a": {"model": "models/tiny"}}})[:-2]

    assert where(check(text, name="p.json")) == [
        "1:42: invalid YAML: expected ',' or '}', but got '<stream end>' (while parsing a flow mapping that "
        "starts at line 1, column 12)"
    ]


def test_custom_tags_are_rejected_once(check: Check) -> None:
    assert where(check("models:\n  a: {model: !env HOME}\n")) == [
        "2:14: unsupported YAML tag !env; profiles hold plain YAML values only"
    ]


def test_explicit_str_tag_is_fine(check: Check) -> None:
    result = check("models: {a: {model: models/tiny, revision: !!str 123}}")

    assert result.profile is not None
    assert result.profile.models["a"].engine_args == {"revision": "123"}


def test_anchors_under_x_keys_merge_into_models(check: Check) -> None:
    result = check("x-base: &base {dtype: float32}\nmodels:\n  a:\n    <<: *base\n    model: models/tiny\n")

    assert result.errors == []
    assert result.profile is not None
    assert result.profile.models["a"].engine_args == {"dtype": "float32"}


def test_alias_bomb_is_stopped(check: Check) -> None:
    lines = ["x-0: &l0 [a, a, a, a, a, a, a, a, a, a]"]
    lines += [f"x-{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 6)]
    lines.append("models: {a: {model: models/tiny, hf_overrides: {x: *l5}}}")

    errors = where(check("\n".join(lines)))

    # It points into the anchor whose expansion went over the limit.
    assert errors == [f"1:35: the profile expands to more than {MAX_VALUES} values (an alias loop?)"]


def test_deep_nesting_is_stopped(check: Check) -> None:
    depth = MAX_DEPTH + 10
    text = "models: {a: {model: models/tiny, hf_overrides: " + "[" * depth + "]" * depth + "}}"

    # The first "[" is at column 48; the one at MAX_DEPTH more is too deep.
    assert where(check(text)) == [f"1:{48 + MAX_DEPTH}: the profile nests deeper than {MAX_DEPTH} levels"]


def test_nesting_too_deep_for_the_parser_is_refused_before_parsing(check: Check) -> None:
    assert where(check("models: " + "[" * 5000 + "]" * 5000)) == [
        f"1:{9 + MAX_FLOW_DEPTH}: the profile nests more than {MAX_FLOW_DEPTH} brackets deep"
    ]


def test_odd_keys(check: Check) -> None:
    result = check("models:\n  ? [a, b]\n  : {model: x}\n  null: {model: y}\n")

    assert where(result) == [
        "2:5: a model name must be a non-empty string, got a list",
        "4:3: a model name must be a non-empty string, got null",
    ]


def test_missing_file(workspace: Path, env: dict[str, str]) -> None:
    path = workspace / "nope.yaml"

    assert where(validate_profile(path, env=env)) == [f"1:1: profile file not found: there is no file at {path}"]


def test_a_folder_or_a_device_is_not_read(workspace: Path, env: dict[str, str]) -> None:
    assert where(validate_profile(workspace, env=env)) == [
        f"1:1: cannot read the profile: {workspace} is not a regular file"
    ]
    if os.path.exists("/dev/zero"):
        assert where(validate_profile("/dev/zero", env=env)) == [
            "1:1: cannot read the profile: /dev/zero is not a regular file"
        ]


def test_huge_file_is_refused(workspace: Path, env: dict[str, str]) -> None:
    path = workspace / "huge.yaml"
    with path.open("wb") as file:
        file.truncate(MAX_BYTES + 1)

    assert where(validate_profile(path, env=env)) == ["1:1: the profile is larger than 4 MiB; that is not a profile"]


def test_paths_with_nul_bytes_are_errors_not_crashes(check: Check, workspace: Path) -> None:
    result = check('models:\n  a: {model: "x\\0y", chat_template: "t\\0.jinja", quant_config: "q\\0"}\n')

    messages = where(result)
    assert [message.split(":")[0:2] for message in messages] == [["2", "14"], ["2", "37"], ["2", "64"]]
    # Control characters are escaped, so that one issue stays one line.
    assert messages[0].endswith(f"there is no folder at {workspace}/x\\x00y")
    assert all("\x00" not in message for message in messages)


def test_json_surrogate_pairs_are_joined_and_lone_ones_rejected(check: Check) -> None:
    # JSON writes characters outside the BMP as escaped surrogate pairs; YAML decodes each half alone.
    text = '{"models": {"\\ud83d\\ude00": {"model": "models/tiny", "revision": "\\ud800"}}}'

    result = check(text, name="p.json")

    assert where(result) == ["1:66: a string holds an unpaired surrogate escape (\\ud800-\\udfff), which is not text"]
    fixed = check(text.replace('"\\ud800"', '"v\\ud83d\\ude00"'), name="p.json")
    assert fixed.profile is not None
    assert fixed.profile.models["\N{GRINNING FACE}"].engine_args == {"revision": "v\N{GRINNING FACE}"}
