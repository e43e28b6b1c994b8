"""The engine package's names load on first use: vLLM's processes import the reconfigure plugin, not the manager."""

from __future__ import annotations

import importlib

import pytest

import server.engine
from tests.fresh_python import fresh_python


def test_every_exported_name_resolves_and_lazy_ones_to_their_defining_module() -> None:
    assert set(server.engine._LAZY) <= set(server.engine.__all__)
    for name, module in server.engine._LAZY.items():
        assert getattr(server.engine, name) is getattr(importlib.import_module(module), name), name
    for name in server.engine.__all__:
        assert getattr(server.engine, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        server.engine.Nope  # noqa: B018


def test_the_plugin_does_not_import_the_manager() -> None:
    code = (
        "import sys, server.engine.vllm_reconfigure.plugin, server.engine.vllm_reconfigure.engine_core; "
        "print(sorted(m for m in sys.modules if m.startswith(('server.engine.manager', 'server.profiles', 'ruamel'))))"
    )
    assert fresh_python(code) == "[]"
