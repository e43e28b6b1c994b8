"""The version check of `vllm_adapter`, run the moment this module is imported.

The check itself lives in ``server/profiles/vllm_version.py``, shared with the engine layer's in-process
reconfigure; importing this module runs it for the frontend adapter.
"""

from __future__ import annotations

from server.profiles.vllm_version import (
    ALLOW_UNKNOWN_ENV,
    SUPPORTED_VLLM_VERSIONS,
    UnknownVllmVersionWarning,
    UnsupportedVllmError,
    check_vllm_version,
)

__all__ = [
    "ALLOW_UNKNOWN_ENV",
    "SUPPORTED_VLLM_VERSIONS",
    "UnknownVllmVersionWarning",
    "UnsupportedVllmError",
    "check_vllm_version",
]

# Importing this module is the check: vllm_adapter imports it before anything else from vLLM.
check_vllm_version()
