"""The engine manager: owns vLLM engines, gates requests and switches the active model.

A layer above ``profiles`` and beside ``frontend`` (see ``server/__init__.py``): it imports neither the frontend nor
Litestar, and knows a model's bundle only as the opaque value its :data:`BundleBuilder` returns.

The manager, its reports and the slot states load on first use (PEP 562): every vLLM process imports
``server.engine.vllm_reconfigure`` for its plugin, and must not pay for the manager, the profiles loader and
their imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Errors and leases import only the standard library: loaded now. The rest imports the profiles loader.
from server.engine.errors import (
    AdmissionTimeout,
    EngineError,
    ManagerClosed,
    ModelLoadFailed,
    ModelNotActive,
    ModelNotFound,
    ModelSwitching,
    NoActiveModel,
    ReloadFailed,
    ReloadRefused,
    RequestAbortedBySwitch,
    SwitchConflict,
    SwitchFailed,
)
from server.engine.lease import Lease, Published

if TYPE_CHECKING:
    from server.engine.manager import BundleBuilder, EngineManager
    from server.engine.report import ManagerSnapshot, ModelsReplaced, SlotSnapshot, SwitchAttempt, SwitchReport
    from server.engine.states import Slot, SlotState

#: Each name loaded on first use, and the module that defines it.
_LAZY = {
    **dict.fromkeys(("BundleBuilder", "EngineManager"), "server.engine.manager"),
    **dict.fromkeys(
        ("ManagerSnapshot", "ModelsReplaced", "SlotSnapshot", "SwitchAttempt", "SwitchReport"), "server.engine.report"
    ),
    **dict.fromkeys(("Slot", "SlotState"), "server.engine.states"),
}

__all__ = [
    "AdmissionTimeout",
    "BundleBuilder",
    "EngineError",
    "EngineManager",
    "Lease",
    "ManagerClosed",
    "ManagerSnapshot",
    "ModelLoadFailed",
    "ModelNotActive",
    "ModelNotFound",
    "ModelSwitching",
    "ModelsReplaced",
    "NoActiveModel",
    "Published",
    "ReloadFailed",
    "ReloadRefused",
    "RequestAbortedBySwitch",
    "Slot",
    "SlotSnapshot",
    "SlotState",
    "SwitchAttempt",
    "SwitchConflict",
    "SwitchFailed",
    "SwitchReport",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
