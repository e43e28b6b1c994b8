"""The adapter's table of what differs between the supported vLLMs (`_moved`) resolves on the installed vLLM,
and a setting an older vLLM lacks is dropped only while it is off."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from server.frontend.settings import FrontendConfigError
from server.frontend.vllm_adapter._moved import NEWER_KWARGS, SINCE, WHERE, moved, optional, supported_kwargs


@pytest.mark.parametrize("name", sorted(WHERE))
def test_every_moved_name_resolves_here(name: str) -> None:
    found = optional(name)
    assert found is not None or name in SINCE
    if name not in SINCE:
        assert moved(name) is found


def test_a_name_in_none_of_its_modules_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(WHERE, "FrontendArgs", ("vllm.no_such_module", "vllm.entrypoints.no_such_module"))
    with pytest.raises(ImportError, match=r"vLLM has no FrontendArgs in any of vllm\.no_such_module"):
        moved("FrontendArgs")
    with pytest.raises(ImportError):
        optional("FrontendArgs")  # not a feature of newer vLLMs only: its absence is an error


def test_a_newer_feature_is_none_where_the_vllm_lacks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(WHERE, "ReadContext", ("vllm.no_such_module",))
    assert optional("ReadContext") is None


#: An older and a newer vLLM's `ChatTemplateConfig`: only the newer one has ``trust_request_mm_kwargs``.
OldConfig = dataclasses.make_dataclass("ChatTemplateConfig", [("chat_template", str | None, None)])
NewConfig = dataclasses.make_dataclass(
    "ChatTemplateConfig", [("chat_template", str | None, None), ("trust_request_mm_kwargs", bool, False)]
)


def test_an_off_setting_the_callee_lacks_is_dropped() -> None:
    kwargs: dict[str, Any] = {"chat_template": "t", "trust_request_mm_kwargs": False}
    assert supported_kwargs(OldConfig, kwargs) == {"chat_template": "t"}
    assert supported_kwargs(NewConfig, kwargs) == kwargs


def test_an_on_setting_the_callee_lacks_is_refused_by_name() -> None:
    with pytest.raises(FrontendConfigError, match=r"trust_request_mm_kwargs=True needs a newer vLLM than the"):
        supported_kwargs(OldConfig, {"chat_template": "t", "trust_request_mm_kwargs": True})
    assert supported_kwargs(NewConfig, {"trust_request_mm_kwargs": True}) == {"trust_request_mm_kwargs": True}


def test_an_unknown_keyword_is_passed_on_for_the_callee_to_refuse() -> None:
    # Only the table's settings are dropped: anything else reaches the callee, which raises its TypeError.
    assert supported_kwargs(OldConfig, {"surprise": 1}) == {"surprise": 1}


def test_the_off_values_are_the_profile_defaults() -> None:
    from server.frontend.settings import FrontendSettings

    defaults = FrontendSettings()
    renames = {"disabled_thinking_effort": "anthropic_disabled_thinking_effort"}
    for settings in NEWER_KWARGS.values():
        for key, off in settings.items():
            assert getattr(defaults, renames.get(key, key)) == off, key
