"""The engine manager: owns vLLM engines, gates requests and switches the active model.

A layer above ``profiles`` and beside ``frontend`` (see ``server/__init__.py``): it imports neither the frontend nor
Litestar, and knows a model's bundle only as the opaque value its :data:`BundleBuilder` returns.

The vLLM plugin that runs inside vLLM's processes is a package of its own (``server/vllm_plugin``), so this one
loads everything at once.
"""

from __future__ import annotations

from server.engine.errors import (
    AdmissionTimeout,
    EngineDied,
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
from server.engine.manager import BundleBuilder, EngineManager
from server.engine.report import (
    ManagerSnapshot,
    ModelsReplaced,
    ResidencyReport,
    RestartPlan,
    SlotSnapshot,
    SwitchAttempt,
    SwitchReport,
)
from server.engine.states import Slot, SlotState

__all__ = [
    "AdmissionTimeout",
    "BundleBuilder",
    "EngineDied",
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
    "ResidencyReport",
    "RestartPlan",
    "Slot",
    "SlotSnapshot",
    "SlotState",
    "SwitchAttempt",
    "SwitchConflict",
    "SwitchFailed",
    "SwitchReport",
]
