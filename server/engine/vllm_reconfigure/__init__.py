"""In-place model swap inside vLLM's own processes (the ``reconfigure`` strategy), on any vLLM platform.

The engine-core and worker processes of one ``AsyncLLM`` stay; only the model, its KV cache and the scheduler
are rebuilt. Everything here uses vLLM's extension points, no fork:

* ``plugin``: the ``vllm.general_plugins`` entry point; adds the utilities below to ``EngineCore``;
* ``engine_core``: the utilities (run in the engine-core process): unload, load, report what is loaded;
* ``worker``: the ``worker_extension_cls`` mixed into vLLM's worker, with the worker-side unload and load;
* ``frontend_state``: refreshes ``AsyncLLM``'s own model state in Turnout's process after a load;
* ``swap``: drives a swap from Turnout's process and checks which model the engine core reports;
* ``protocol``: utility names and result shapes shared by both sides;
* ``config_attrs``: the ``VllmConfig`` parts vLLM's executor and worker copy, which a load copies again.

Written against vLLM 0.32.0 (``server/profiles/vllm_version.py`` refuses others). This package belongs to the
engine layer and never imports the frontend layer. Its modules import vLLM lazily, so that loading the plugin
costs vLLM's processes next to nothing.
"""

from server.engine.vllm_reconfigure.protocol import WORKER_EXTENSION

__all__ = ["WORKER_EXTENSION"]
