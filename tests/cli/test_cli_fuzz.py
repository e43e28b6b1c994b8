"""Property: no profile, however mangled, makes validation raise or ``turnout validate`` print a traceback.

Valid profiles (YAML and JSON) are mutated the ways people and tools break files: keys added, removed or
retyped, values replaced by random ones, the text cut short, random bytes spliced in.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from server.cli.validate import run_validate
from server.profiles import validate_profile
from tests.fakes.parsers import FakeParserRegistry
from tests.fakes.profile_files import VALID_PROFILE

ISSUE_LINE = re.compile(r"^.+:\d+:\d+: (error|warning): ")
SUMMARY_LINE = re.compile(r"^.+: model '.*' (\(default\) )?-> ")
PLAUSIBLE_KEYS = [
    "model",
    "default_model",
    "models",
    "switching",
    "server",
    "mode",
    "drain_timeout",
    "strategy",
    "sleep_level",
    "max_active",
    "admin_token_env",
    "enable_auto_tool_choice",
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
    "quant_config",
    "max_model_len",
    "dtype",
    "download_dir",
    "hf_overrides",
    "<<",
]
PLAUSIBLE_STRINGS = [
    "hermes",
    "qwen3",
    "models/tiny",
    "./models/tiny",
    "templates/tools.jinja",
    "quant/fp8.json",
    "tiny",
    "other",
    "org/model",
    "auto",
    "keep",
    "",
    "..",
    "/",
    "~",
    "{{ x }}",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(PLAUSIBLE_STRINGS),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
keys = st.one_of(st.sampled_from(PLAUSIBLE_KEYS), st.text(max_size=12), st.integers(-5, 5))


def _base() -> dict[str, Any]:
    loaded = YAML(typ="safe").load(VALID_PROFILE)
    assert isinstance(loaded, dict)
    return loaded


def _mappings(node: Any) -> list[dict[Any, Any]]:
    """Every mapping in the tree, the root first."""
    found: list[dict[Any, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for child in node.values():
            found.extend(_mappings(child))
    elif isinstance(node, list):
        for child in node:
            found.extend(_mappings(child))
    return found


@st.composite
def mutated_profiles(draw: st.DrawFn) -> tuple[bytes, str]:
    """A valid profile after 1-4 structural mutations, dumped as YAML or JSON, maybe then damaged as text."""
    data = _base()
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(_mappings(data)))
        action = draw(st.sampled_from(["add", "replace", "delete", "retype"]))
        if action == "add" or not target:
            target[draw(keys)] = draw(values)
        else:
            key = draw(st.sampled_from(sorted(target, key=repr)))
            if action == "delete":
                del target[key]
            elif action == "replace":
                target[key] = draw(values)
            else:
                target[key] = draw(scalars)
    as_json = draw(st.booleans())
    if as_json:
        text = json.dumps(data, default=str, allow_nan=True)
        suffix = ".json"
    else:
        buffer = io.StringIO()
        YAML(typ="safe").dump(data, buffer)
        text, suffix = buffer.getvalue(), ".yaml"
    raw = text.encode()
    damage = draw(st.sampled_from(["none", "none", "truncate", "splice"]))
    if damage == "truncate":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif damage == "splice":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    return raw, suffix


@settings(  # as many examples as the profile says (tests/conftest.py)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=mutated_profiles())
# Found by this test: a model named with YAML's \N (U+0085, a line break to str.splitlines) split a message.
@example(case=(b'default_model: tiny\nmodels: {? " \\N" : null}\n', ".yaml"))
def test_mutated_profiles_never_crash(case: tuple[bytes, str], workspace: Path, env: dict[str, str]) -> None:
    raw, suffix = case
    path = workspace / f"fuzz{suffix}"
    path.write_bytes(raw)
    parsers = FakeParserRegistry()

    result = validate_profile(path, env=env, parsers=parsers)  # must not raise

    assert (result.profile is None) == bool(result.errors)
    for issue in [*result.errors, *result.warnings]:
        assert issue.line >= 1
        assert issue.col >= 1
        assert "\n" not in issue.message
    out = io.StringIO()
    code = run_validate([str(path)], env=env, parsers=parsers, out=out)
    assert code == (1 if result.errors else 0)
    output = out.getvalue()
    assert "Traceback" not in output
    assert "internal error" not in output
    for line in output.splitlines():
        assert ISSUE_LINE.match(line) or (code == 0 and SUMMARY_LINE.match(line)), line
