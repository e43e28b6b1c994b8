"""Turnout's vLLM plugin: runs inside vLLM's own engine-core and worker processes, for in-place model swaps.

The engine-core and worker processes of one ``AsyncLLM`` stay; only the model, its KV cache and the scheduler
are rebuilt. Everything here uses vLLM's extension points, no fork:

* ``plugin``: the ``vllm.general_plugins`` entry point; adds the utilities below to ``EngineCore``;
* ``engine_core``: the utilities (run in the engine-core process): unload, load, report what is loaded;
* ``worker``: the ``worker_extension_cls`` mixed into vLLM's worker, with the worker-side unload and load;
* ``protocol``: utility names and result shapes shared with Turnout's process;
* ``config_attrs``: the ``VllmConfig`` parts vLLM's executor and worker copy, which a load copies again;
* ``kv_keep``, ``kv_keep_core``, ``kv_pool``, ``kv_pool_owner``: a model's prefix-cache blocks kept across swaps
  and stops (a KV connector on vLLM's public API, its keep step, the bounded host-memory pool, and the server's
  one owner of the pool's private folder);
* ``checkpoint_content``: a checkpoint's files named by their content (kept blocks' identity, fingerprints' keys);
* ``start_log``: an engine start's timing lines and imports, recorded in vLLM's processes for Turnout's phases;
* ``private_folder``: the one check of a folder Turnout keeps state in (the pool's; the engine's compile cache);
* ``compile_headers``: torch's precompiled headers kept in the engine's private compile cache.

A package of its own beside ``server/engine`` because it runs in other processes: it may import only the
profiles layer and vLLM (``tests/test_layers.py``), so loading it costs vLLM's processes next to nothing. The
Turnout side of a swap (drive it, check the engine core's answer, refresh ``AsyncLLM``'s state) is
``server/engine/runtime/in_place_swap.py``. Runs on vLLM 0.32.0 to 0.33.x (``server/profiles/vllm_version.py``
refuses others).
"""

from server.vllm_plugin.checkpoint_content import (
    CONTENT_DIGESTS_FILE,
    TOKENIZER_SUFFIXES,
    WEIGHT_SUFFIXES,
    ContentDigests,
    content_stamp,
)
from server.vllm_plugin.compile_headers import COMPILE_HEADERS_ENV
from server.vllm_plugin.kv_keep_core import CONNECTOR_NAME as KEPT_KV_CONNECTOR
from server.vllm_plugin.kv_keep_core import (
    close_kv_pool,
    keep_before_stop,
    kept_bytes_by_model,
    server_kv_pool,
    with_kv_keep,
)
from server.vllm_plugin.private_folder import FolderNotPrivate, check_private, check_private_path, private_subfolder
from server.vllm_plugin.protocol import WORKER_EXTENSION
from server.vllm_plugin.start_log import START_LOG_ENV, StartEvent

__all__ = [
    "COMPILE_HEADERS_ENV",
    "CONTENT_DIGESTS_FILE",
    "KEPT_KV_CONNECTOR",
    "START_LOG_ENV",
    "TOKENIZER_SUFFIXES",
    "WEIGHT_SUFFIXES",
    "WORKER_EXTENSION",
    "ContentDigests",
    "FolderNotPrivate",
    "StartEvent",
    "check_private",
    "check_private_path",
    "close_kv_pool",
    "content_stamp",
    "keep_before_stop",
    "kept_bytes_by_model",
    "private_subfolder",
    "server_kv_pool",
    "with_kv_keep",
]
