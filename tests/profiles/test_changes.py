"""What a reload would change: model by model, files by content, restart-only settings apart."""

from __future__ import annotations

from pathlib import Path

from server.profiles import Profile
from server.profiles.changes import diff_profiles, file_digests
from tests.fakes.profile_files import VALID_PROFILE
from tests.profiles.conftest import Check


def _load(check: Check, text: str) -> Profile:
    result = check(text)
    assert result.profile is not None, result.errors
    return result.profile


def test_an_identical_profile_changes_nothing(check: Check) -> None:
    old = _load(check, VALID_PROFILE)
    new = _load(check, VALID_PROFILE)
    assert diff_profiles(old, file_digests(old), new, file_digests(new)).empty


def test_a_template_edited_in_place_is_a_frontend_change(check: Check, workspace: Path) -> None:
    old = _load(check, VALID_PROFILE)
    digests = file_digests(old)
    template = workspace / "templates" / "tools.jinja"
    template.write_text(template.read_text() + "{# edited #}\n")
    new = _load(check, VALID_PROFILE)
    changes = diff_profiles(old, digests, new, file_digests(new))
    assert [(c.name, c.kind, c.frontend, c.engine) for c in changes.models] == [
        ("tiny", "changed", ["chat_template"], [])
    ]


def test_engine_and_frontend_fields_are_told_apart(check: Check) -> None:
    old = _load(check, VALID_PROFILE)
    text = (
        VALID_PROFILE.replace("max_model_len: 512", "max_model_len: 256")
        .replace("reasoning_parser: qwen3", "reasoning_parser: deepseek_r1")
        .replace("tool_call_parser: hermes", "tool_call_parser: mistral")
        .replace("    dtype: float32\n", "    dtype: float32\n    enforce_eager: true\n")
    )
    new = _load(check, text)
    changes = diff_profiles(old, file_digests(old), new, file_digests(new))
    by_name = {c.name: c for c in changes.models}
    assert by_name["tiny"].frontend == ["tool_call_parser", "reasoning_parser"]
    # The reasoning parser is also the engine's (structured output), so it applies at the next load too.
    assert by_name["tiny"].engine == ["reasoning_parser", "max_model_len"]
    assert by_name["other"].frontend == [] and by_name["other"].engine == ["enforce_eager"]


def test_added_removed_and_restart_only(check: Check) -> None:
    old = _load(check, VALID_PROFILE)
    text = (
        VALID_PROFILE.replace("  other:\n", "  third:\n")
        .replace("drain_timeout: 5", "drain_timeout: 9")
        .replace("strategy: keep", "strategy: stop")
    )
    new = _load(check, text)
    changes = diff_profiles(old, file_digests(old), new, file_digests(new))
    assert [(c.name, c.kind) for c in changes.models] == [("third", "added"), ("other", "removed")]
    assert changes.names("added") == ["third"]
    assert changes.restart_only == ["switching.drain_timeout", "switching.strategy"]


def test_residency_keys_are_a_change_of_their_own(check: Check) -> None:
    old = _load(check, VALID_PROFILE)
    new = _load(check, VALID_PROFILE.replace("    dtype: float32\n", "    dtype: float32\n    pinned: true\n"))
    changes = diff_profiles(old, file_digests(old), new, file_digests(new))
    assert [(c.name, c.frontend, c.engine, c.residency) for c in changes.models] == [("other", [], [], ["pinned"])]
    assert new.models["other"].pinned and not old.models["other"].pinned


def test_request_bounds_apply_at_once_as_residency_keys_do(check: Check) -> None:
    old = _load(check, VALID_PROFILE)
    new = _load(check, VALID_PROFILE.replace("    dtype: float32\n", "    dtype: float32\n    max_n: 8\n"))
    changes = diff_profiles(old, file_digests(old), new, file_digests(new))
    assert [(c.name, c.frontend, c.engine, c.residency) for c in changes.models] == [("other", [], [], ["max_n"])]
