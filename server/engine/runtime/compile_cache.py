"""The engines' compile cache: torch inductor's cache in a private folder of Turnout's, one per model identity.

On CPU vLLM 0.32 compiles with ``torch.compile``'s inductor backend directly (``CompilationMode.DYNAMO_TRACE_ONCE``:
vLLM's own backend and its ``compilation_config.cache_dir`` under ``VLLM_CACHE_ROOT`` are not used), so the compiled
kernels go where torch keeps its cache: ``TORCHINDUCTOR_CACHE_DIR``, by default ``/tmp/torchinductor_<user>``. That
name is predictable, in a folder every local user may write: another user can create it first and plant code that
an engine then loads, or read what it compiled. So every engine start (spawned or forked: the variable is in the
environment its processes start with) sets ``TORCHINDUCTOR_CACHE_DIR`` to ``<cache home>/turnout/compile/<identity>``:

* the cache home is ``$XDG_CACHE_HOME``, else ``~/.cache`` (this user's);
* the identity (:func:`compile_identity`) is a digest of what the model is started from (its path, engine args,
  quantization config), so its compiled kernels survive restarts of the same model and no model shares another's;
* each folder on the way is checked before each start without following links (``server.vllm_plugin``'s
  ``check_private``): ``compile`` and the identity's are created mode 0700 and must be this user's real folders of
  mode 0700; ``turnout`` (created 0700 if missing; Turnout's scripts keep other caches in it) must be this user's
  real folder that nobody else may write. One that fails is never used: this process then keeps its compile caches
  in a fresh ``mkdtemp`` folder (logged once; removed at exit), the cache lost with it.

torch's precompiled C++ headers (150 MB each, in ``/tmp/torchinductor_<user>`` whatever the variable says) go to
``compile/headers`` beside the identities' folders (``COMPILE_HEADERS_ENV``, applied by the plugin in the engine's
processes), whoever chose the compile cache.

A folder the operator set in ``TORCHINDUCTOR_CACHE_DIR`` is used (by its real path) once it passes
``check_private_path``: this user's real folder that nobody else may write, below folders nobody else may write
(``/tmp`` itself passes: it is sticky). One that fails is not used, with a warning naming why, and the engine
compiles into Turnout's folder as if the variable were unset: a warning the operator reads beats a server that
refuses to start, and never an engine that loads what another user could plant. A missing one is created (mode
0700) and then checked. torch's own default (the path above), which torch writes into the environment of a
process that used its cache, counts as unset. With ``VLLM_USE_AOT_COMPILE=1`` (off on CPU unless
set: see ``vllm_loader.AOT_COMPILE_ENV``) vLLM points the variable at its own AOT cache under ``VLLM_CACHE_ROOT``
(``~/.cache/vllm``), this user's. An engine that swaps models in place keeps the folder of the model it started with.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from server.profiles.schema import ModelProfile
from server.vllm_plugin import COMPILE_HEADERS_ENV, check_private, check_private_path, private_subfolder

__all__ = ["COMPILE_CACHE_ENV", "compile_cache_env", "compile_cache_root", "compile_identity", "torch_default_cache"]

logger = logging.getLogger("turnout.engine")

#: Where torch inductor keeps its cache (compiled kernels, FX graphs, autograd graphs), read as it compiles.
COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"

#: The folder of torch's precompiled headers, beside the identities' (``server/vllm_plugin/compile_headers.py``).
HEADERS = "headers"

_fallback: Path | None = None
_fallback_lock = threading.Lock()


def compile_identity(*models: ModelProfile) -> str:
    """A digest of what an engine for ``models`` is started from: its compiled kernels are this identity's.

    One model for an engine of its own; every model of a stash host (one engine core compiles them all).
    """
    parts: list[object] = [[model.model, model.engine_args, model.quant_config] for model in models]
    if len(parts) == 1:
        parts = parts[0]  # type: ignore[assignment]  # one model's digest as it always was: its cache survives
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def compile_cache_root() -> Path:
    """``<cache home>/turnout/compile``: ``$XDG_CACHE_HOME``, else ``~/.cache``."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "turnout" / "compile"


def torch_default_cache() -> str:
    """torch's default ``TORCHINDUCTOR_CACHE_DIR`` (``torch._inductor.runtime.cache_dir_utils.default_cache_dir``)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def compile_cache_env(*models: ModelProfile, root: Path | None = None) -> dict[str, str]:
    """The environment an engine for ``models`` starts with for its compile cache (see the module's docstring).

    Args:
        models: The profile of the engine's model (every model of a stash host).
        root: The folder of the identities' folders (default :func:`compile_cache_root`).
    """
    root = root or compile_cache_root()
    own = _operator_cache()
    if own is not None:  # the operator's folder is theirs: torch's headers still go to Turnout's private one
        return {COMPILE_CACHE_ENV: str(own), COMPILE_HEADERS_ENV: str(_private_folder(root, HEADERS))}
    cache = _private_folder(root, compile_identity(*models))
    # torch's precompiled headers depend on the compiler and its flags only: one folder beside the identities'.
    return {COMPILE_CACHE_ENV: str(cache), COMPILE_HEADERS_ENV: str(private_subfolder(cache.parent, HEADERS))}


_refused: set[str] = set()


def _operator_cache() -> Path | None:
    """The operator's ``TORCHINDUCTOR_CACHE_DIR`` (its real path) when it is safe from other users; else None."""
    own = os.environ.get(COMPILE_CACHE_ENV)
    if not own or os.path.abspath(own) == torch_default_cache():
        return None
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(os.path.realpath(own), 0o700)  # only when missing; what it is gets checked below
        return check_private_path(Path(own))
    except OSError as exc:
        if own not in _refused:
            _refused.add(own)
            logger.warning(
                "%s=%s is not used (%s): engines compile into Turnout's own folder", COMPILE_CACHE_ENV, own, exc
            )
        return None


def _private_folder(root: Path, name: str) -> Path:
    """``root/name``, each folder Turnout makes on the way checked; the fallback folder's when one fails."""
    try:
        root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the cache home above it: the user's, unchecked
        check_private(root.parent, others_may_read=True)
        folder = root.parent
        for part in (root.name, name):
            folder = private_subfolder(folder, part)
        return folder
    except OSError as exc:
        return private_subfolder(_fallback_folder(root, exc), name)


def _fallback_folder(root: Path, why: OSError) -> Path:
    """This process's fresh private folder (``mkdtemp``: mode 0700, a name nobody can predict), removed at exit."""
    global _fallback
    with _fallback_lock:
        if _fallback is not None:
            try:
                check_private(_fallback)
                return _fallback
            except OSError:
                pass
        _fallback = Path(tempfile.mkdtemp(prefix="turnout-compile-"))
        atexit.register(_remove, _fallback, os.getpid())
        logger.warning(
            "the compile cache %s is not used (%s): engines compile into %s, removed at exit", root, why, _fallback
        )
        return _fallback


def _remove(folder: Path, owner_pid: int) -> None:
    """Remove the fallback folder, in the process that made it only (never a forked child's copy of the hook)."""
    if os.getpid() == owner_pid:
        shutil.rmtree(folder, ignore_errors=True)
