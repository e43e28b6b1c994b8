"""torch inductor's precompiled C++ headers in the engine's private compile cache, not torch's shared ``/tmp`` folder.

torch 2.x (``torch/_inductor/codecache.py``) keeps the headers it precompiles for CPU kernels (``.gch`` files, about
150 MB each) in ``/tmp/torchinductor_<user>/precompiled_headers``, whatever ``TORCHINDUCTOR_CACHE_DIR`` says: its
module globals ``_HEADER_DIR`` and ``_HEADER_LOCK_DIR`` are fixed at import from the default path. That name can be
created first by another local user, and a header planted there is compiled into every kernel. So Turnout's engine
start names a private folder in :data:`COMPILE_HEADERS_ENV` (``server/engine/runtime/compile_cache.py``), and the
plugin, in each engine process before anything compiles, checks that folder is still private and points those two
globals at it; when it is not, precompiled headers are turned off for the process (kernels compile without them,
slower). A torch without those globals is left as it is (a test pins them against the installed torch).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from server.vllm_plugin.private_folder import check_private

__all__ = ["COMPILE_HEADERS_ENV", "HEADER_GLOBALS", "redirect_precompiled_headers"]

#: The private folder for the precompiled headers of an engine's processes (set by Turnout around a start).
COMPILE_HEADERS_ENV = "TURNOUT_COMPILE_HEADERS"
#: torch's module and its globals that name the headers' folder and its lock folder.
HEADER_MODULE = "torch._inductor.codecache"
HEADER_GLOBALS = ("_HEADER_DIR", "_HEADER_LOCK_DIR")


def redirect_precompiled_headers() -> bool:
    """Point torch's precompiled headers at :data:`COMPILE_HEADERS_ENV`'s folder; True when it did.

    Does nothing without the variable (a process Turnout did not start, vLLM's own server) or on a torch without
    the globals.
    """
    folder = os.environ.get(COMPILE_HEADERS_ENV)
    if not folder:
        return False
    codecache = importlib.import_module(HEADER_MODULE)  # vLLM's engine core and worker have imported it already
    if not all(hasattr(codecache, name) for name in HEADER_GLOBALS):
        return False
    try:
        check_private(Path(folder))
    except OSError:
        from torch._inductor import config

        config.cpp_cache_precompile_headers = False  # never the shared default instead
        return False
    setattr(codecache, HEADER_GLOBALS[0], folder)
    setattr(codecache, HEADER_GLOBALS[1], os.path.join(folder, "locks"))
    return True
