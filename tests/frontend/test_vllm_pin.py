"""The adapters accept the vLLM range they support and refuse anything outside it, unless told to try anyway."""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
from pathlib import Path

import pytest
import vllm

from server.profiles.vllm_version import (
    ALLOW_UNKNOWN_ENV,
    FRONTEND_ADAPTER,
    IN_PLACE_ADAPTER,
    SUPPORTED_VLLM,
    UnknownVllmVersionWarning,
    UnsupportedVllmError,
    check_vllm_version,
    install_hint,
)

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def pinned_vllm() -> str:
    """pyproject's ``cpu`` extra's vLLM requirement, less its extras: the one place the pin is stated."""
    extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]["cpu"]
    (requirement,) = [item for item in extras if item.startswith("vllm")]
    return re.sub(r"\[[^]]*\]", "", requirement)


EXPECTED = re.escape(
    "Turnout's vLLM adapter (server/frontend/vllm_adapter/) supports vLLM 0.26.0 to 0.33.x; found 0.34.1. "
    f"Install {pinned_vllm()} or update server/frontend/vllm_adapter/"
)


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(ALLOW_UNKNOWN_ENV, raising=False)
    monkeypatch.setattr(vllm, "__version__", "0.34.1")
    return monkeypatch


def test_the_installed_vllm_is_supported() -> None:
    assert vllm.__version__ in SUPPORTED_VLLM[FRONTEND_ADAPTER]
    check_vllm_version()


def test_the_install_hint_is_pyprojects_pin() -> None:
    # The pin lives in pyproject alone; the hint reads it from the installed metadata, and the pinned release is
    # one both adapters support.
    assert install_hint() == pinned_vllm()
    version = pinned_vllm().partition("==")[2]
    assert version in SUPPORTED_VLLM[FRONTEND_ADAPTER]
    assert version in SUPPORTED_VLLM[IN_PLACE_ADAPTER]


@pytest.mark.parametrize(
    "version",
    ["0.26.0", "0.27.1", "0.27.1.dev12+g1234abc", "0.28.0", "0.31.2", "0.32.0", "0.33.0", "0.33.9+cu130"],
)
def test_the_frontend_range_accepts_026_to_033(version: str) -> None:
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.25.1", "0.34.0", "1.0.0", "0.26", "nightly"])
def test_the_frontend_range_refuses_what_is_outside(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_UNKNOWN_ENV, raising=False)
    with pytest.raises(UnsupportedVllmError, match=f"found {re.escape(version)}"):
        check_vllm_version(version)


@pytest.mark.parametrize(
    ("version", "supported"), [("0.28.0", False), ("0.31.9", False), ("0.32.0", True), ("0.33.0", True)]
)
def test_the_in_place_plugin_range(version: str, supported: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_UNKNOWN_ENV, raising=False)
    assert (version in SUPPORTED_VLLM[IN_PLACE_ADAPTER]) is supported
    if not supported:
        with pytest.raises(UnsupportedVllmError, match=r"\(server/vllm_plugin/\) supports vLLM 0\.32\.0 to 0\.33\.x"):
            check_vllm_version(version, adapter=IN_PLACE_ADAPTER)


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
