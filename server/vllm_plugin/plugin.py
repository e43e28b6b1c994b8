"""The ``vllm.general_plugins`` entry point: vLLM calls :func:`register` in every process it starts.

It must be cheap and change nothing for an engine that never swaps models in place: vLLM's own API server in
the same environment loads it too (the benchmark baseline). So it only adds three utility methods to
``EngineCore`` in the engine-core process, where vLLM has imported that class already; has every process vLLM
spawned end with its parent (``parent_watch.py``: no engine outlives the server that started it) and exit in a
fraction of a second once vLLM's shutdown ran (``quick_exit.py``); and freezes the start-up heap of the workers of
engines that swap in place (``start_heap.py``); and records the timing lines of an engine start that Turnout is
timing (``start_log.py``); and keeps torch's precompiled headers in the start's private compile cache
(``compile_headers.py``).

A process forked from one that loaded the plugins (an engine core forked by Turnout's engine launcher, the worker it
forks) inherits vLLM's "plugins loaded" flag, so vLLM's ``load_general_plugins`` would skip them there; and vLLM's
worker sets its logging up again first (``configure_logging``), dropping the start-event handler it inherited. So
:func:`register` has the flag cleared in every child forked after it ran (``os.register_at_fork``): vLLM loads the
plugins in a forked process as in a spawned one, and a forked start records the same events.
On a vLLM version the utilities were not written for it installs nothing and logs why; Turnout's reconfigure
strategy then refuses to start with the version error (see ``server/profiles/vllm_version.py``).
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["register"]

logger = logging.getLogger("turnout.engine.reconfigure")


def register() -> None:
    """End this process with its parent (any process vLLM spawned), and install the reconfigure utilities on
    vLLM's ``EngineCore`` when this process has one."""
    from server.vllm_plugin.compile_headers import redirect_precompiled_headers
    from server.vllm_plugin.parent_watch import watch_parent
    from server.vllm_plugin.quick_exit import exit_quickly
    from server.vllm_plugin.start_heap import freeze_if_in_place_worker, in_worker_process
    from server.vllm_plugin.start_log import record_start_events

    record_start_events()  # first: its stamp ends this process's imports
    _load_again_in_forked_children()
    watch_parent()
    exit_quickly()  # an engine's shutdown: 5 s of interpreter exit become a fraction of one
    redirect_precompiled_headers()  # before anything compiles: the start's private folder, not /tmp's shared one
    core_module = sys.modules.get("vllm.v1.engine.core")
    if core_module is None or in_worker_process():  # a worker forked from its core has the core's modules too
        freeze_if_in_place_worker()  # a worker that swaps in place: its start-up heap, before any model
        return  # not an engine-core process (API server, worker): nothing to install
    from server.profiles.vllm_version import IN_PLACE_ADAPTER, SUPPORTED_VLLM, installed_vllm_version

    version = installed_vllm_version()
    if version not in SUPPORTED_VLLM[IN_PLACE_ADAPTER]:
        logger.warning(
            "Turnout's reconfigure utilities support vLLM %s, not %s: not installed",
            SUPPORTED_VLLM[IN_PLACE_ADAPTER],
            version,
        )
        return
    from server.vllm_plugin.engine_core import install

    install(core_module.EngineCore)


_at_fork_registered = False


def _load_again_in_forked_children() -> None:
    """Have vLLM load the plugins again in each process forked from this one (see the module's docstring)."""
    global _at_fork_registered
    if not _at_fork_registered:  # a forked child inherits both the hook and this flag
        _at_fork_registered = True
        os.register_at_fork(after_in_child=_plugins_not_loaded)


def _plugins_not_loaded() -> None:
    plugins = sys.modules.get("vllm.plugins")
    if plugins is not None and hasattr(plugins, "plugins_loaded"):
        setattr(plugins, "plugins_loaded", False)  # noqa: B010  (vLLM's module global, not a declared attribute)
