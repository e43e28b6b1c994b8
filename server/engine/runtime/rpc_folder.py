"""Each engine's own folder for vLLM's ZMQ ``ipc://`` sockets, instead of ``/tmp`` itself.

vLLM 0.32 names each ``ipc://`` socket ``<VLLM_RPC_BASE_PATH>/<uuid4>`` (``vllm/utils/network_utils.py``:
``get_open_zmq_ipc_path``; the variable defaults to ``tempfile.gettempdir()``): the engine client in Turnout's
process binds its handshake, input and output sockets there as the engine starts, and the engine core binds the
message queues to its workers. In ``/tmp`` (mode 1777) each socket file is made under the process's umask: with the
usual 022 another local user may connect to it and speak vLLM's protocol to the engine (pickled messages). So each
engine start gets a folder of its own (:func:`new_rpc_folder`, mode 0700, an unpredictable name, inside this
process's own ``mkdtemp`` folder), named in ``VLLM_RPC_BASE_PATH`` around the start (the core inherits it; vLLM reads
the variable at each call until the core caches its variables, after its start). Nobody else can reach a socket in
it whatever its mode.

The loader that started the engine removes its folder once the engine has stopped, or its start failed
(:func:`remove_rpc_folder`); a folder of an engine that died stays until its slot unloads it. This process's own
folder, with whatever is left in it, is removed at its exit (not by a forked child's copy of the exit hook).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from server.vllm_plugin import check_private

__all__ = ["RPC_BASE_ENV", "new_rpc_folder", "remove_rpc_folder"]

logger = logging.getLogger("turnout.engine")

#: Where vLLM puts its ``ipc://`` sockets (``vllm/envs.py``).
RPC_BASE_ENV = "VLLM_RPC_BASE_PATH"

_root: Path | None = None
_lock = threading.Lock()


def new_rpc_folder() -> Path:
    """A fresh private folder (mode 0700) for one engine's sockets, inside this process's own."""
    return Path(tempfile.mkdtemp(prefix="engine-", dir=_process_folder()))


def remove_rpc_folder(folder: Path) -> None:
    """Remove an engine's socket folder (its engine has stopped, or never started)."""
    shutil.rmtree(folder, ignore_errors=True)


def _process_folder() -> Path:
    """This process's folder of the engines' socket folders: made once, checked before each use, removed at exit."""
    global _root
    with _lock:
        if _root is not None:
            try:
                check_private(_root)
                return _root
            except OSError:  # removed or replaced under us (a test's temporary folder): a new one
                pass
        _root = Path(tempfile.mkdtemp(prefix="turnout-rpc-"))
        atexit.register(_remove, _root, os.getpid())
        return _root


def _remove(folder: Path, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        shutil.rmtree(folder, ignore_errors=True)
