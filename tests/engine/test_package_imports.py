"""The vLLM plugin runs in vLLM's own processes: importing it must not load the manager or the profiles loader."""

from __future__ import annotations

from tests.fresh_python import fresh_python


def test_the_plugin_does_not_import_the_engine_layer_or_the_profiles_loader() -> None:
    code = (
        "import sys, server.vllm_plugin.plugin, server.vllm_plugin.engine_core, server.vllm_plugin.worker; "
        "print(sorted(m for m in sys.modules if m.startswith(('server.engine', 'server.profiles', 'ruamel'))))"
    )
    assert fresh_python(code) == "[]"


def test_the_check_sees_an_engine_import() -> None:
    # The test must be able to fail: importing the in-place swap's Turnout side loads the engine layer.
    code = "import sys, server.engine.runtime.in_place_swap; print('server.engine' in sys.modules)"
    assert fresh_python(code) == "True"
