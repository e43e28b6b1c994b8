"""torch's precompiled headers go to the start's private folder in each engine process (not torch's shared
``/tmp/torchinductor_<user>``), and a folder that is not private turns them off; the torch globals the plugin sets are
pinned against the installed torch."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.vllm_plugin import COMPILE_HEADERS_ENV
from server.vllm_plugin.compile_headers import HEADER_GLOBALS, HEADER_MODULE, redirect_precompiled_headers


@pytest.fixture
def codecache(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    import importlib

    import torch._inductor.config as config

    module = importlib.import_module(HEADER_MODULE)
    for name in HEADER_GLOBALS:  # restored after the test
        monkeypatch.setattr(module, name, getattr(module, name))
    precompile = config.cpp_cache_precompile_headers  # torch's config module: not monkeypatch's to restore
    try:
        yield module
    finally:
        config.cpp_cache_precompile_headers = precompile


def test_torch_precompiles_its_headers_into_the_folder_the_plugin_sets(codecache: object) -> None:
    source = inspect.getsource(codecache._precompile_header)  # type: ignore[attr-defined]
    assert "specified_dir=_HEADER_DIR" in source and "_HEADER_LOCK_DIR" in source
    assert "torchinductor_" in getattr(codecache, HEADER_GLOBALS[0]), "torch's default is the shared tmp folder"


def test_an_engine_process_uses_the_starts_private_folder(
    codecache: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(COMPILE_HEADERS_ENV, raising=False)
    default = getattr(codecache, HEADER_GLOBALS[0])
    assert not redirect_precompiled_headers() and getattr(codecache, HEADER_GLOBALS[0]) == default
    private = tmp_path / "headers"
    private.mkdir(mode=0o700)
    monkeypatch.setenv(COMPILE_HEADERS_ENV, str(private))
    assert redirect_precompiled_headers()
    assert getattr(codecache, HEADER_GLOBALS[0]) == str(private)
    assert getattr(codecache, HEADER_GLOBALS[1]) == str(private / "locks")


def test_a_folder_that_is_not_private_turns_precompiled_headers_off(
    codecache: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch._inductor.config as config

    default = getattr(codecache, HEADER_GLOBALS[0])
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    monkeypatch.setenv(COMPILE_HEADERS_ENV, str(open_to_all))
    config.cpp_cache_precompile_headers = True
    assert not redirect_precompiled_headers()
    assert config.cpp_cache_precompile_headers is False and getattr(codecache, HEADER_GLOBALS[0]) == default
