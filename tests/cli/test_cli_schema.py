"""``turnout schema`` prints the profile file's JSON Schema, from the Structs that validate profiles: the shipped
profiles pass it, a misspelt key fails it, and every key it names carries its reference text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from server.cli.main import main
from server.profiles import ApiKeyScope, ModelProfile, Profile, ServerSection, Switching, profile_json_schema

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "profiles").glob("*.yaml"))


@pytest.fixture(scope="module")
def printed() -> dict[str, Any]:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    schema: dict[str, Any] = json.loads(result.output)
    return schema


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_printed_schema_is_the_profiles_own(printed: dict[str, Any]) -> None:
    assert printed == profile_json_schema()
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_profile_passes(printed: dict[str, Any], path: Path) -> None:
    document = YAML(typ="safe").load(path.read_text())
    assert list(_validator(printed).iter_errors(document)) == []


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"models": {"a": {"model": "m"}}, "switching": {"mode": "sometimes"}}, ["switching", "mode"]),
        ({"models": {"a": {"model": "m"}}, "switching": {"max_modle_len": 1}}, ["switching"]),
        ({"models": {"a": {"model": "m", "max_concurrent_requests": 0}}}, ["models", "a", "max_concurrent_requests"]),
        ({"models": {"a": {"model": "m"}}, "server": {"api_keys": [{"key_env": "K"}]}}, ["server", "api_keys", 0]),
        ({"models": {"a": {"model": "m"}}, "defualt_model": "a"}, []),
        ({"models": {"a": {"max_model_len": 8}}}, ["models", "a"]),
        ({"default_model": "a"}, []),
    ],
)
def test_a_broken_profile_fails_at_its_key(printed: dict[str, Any], document: Any, where: list[Any]) -> None:
    errors = list(_validator(printed).iter_errors(document))
    assert [list(error.absolute_path) for error in errors] == [where]


def test_engine_arguments_and_anchor_keys_pass(printed: dict[str, Any]) -> None:
    document = {"x-engine": {"dtype": "float32"}, "models": {"a": {"model": "m", "max_model_len": 8192}}}
    assert list(_validator(printed).iter_errors(document)) == []


def test_every_file_key_has_its_reference_text(printed: dict[str, Any]) -> None:
    defs = printed["$defs"]
    for struct in (Profile, ModelProfile, Switching, ServerSection, ApiKeyScope):
        names = {f.encode_name for f in msgspec.structs.fields(struct)} - {"path", "engine_args"}
        properties = defs[struct.__name__]["properties"]
        assert set(properties) == names
        assert all(properties[name].get("description") for name in names), struct.__name__
