"""The engine manager: owns vLLM engines, gates requests and switches the active model.

A layer above ``profiles`` and ``vllm_plugin`` and beside ``frontend`` (see ``server/__init__.py``): it imports
neither the frontend nor Litestar, and knows a model's bundle only as the opaque value its :data:`BundleBuilder`
returns.

This face is all other packages import (``tests/test_layers.py``): the manager and what it reports, its errors,
the start-up steps the CLI and the Ray node run (:func:`prepare_profile`, :func:`build_manager`, the engine flags
and the memory plan), the counters the metrics read, and this user's private state folder (:class:`StateDir`).
The modules behind it are the engine's own to move. Importing it does not import vLLM (the engines import it when
they start), so ``turnout serve`` refuses a bad profile fast.

Behind it the engine is in rooms by role, each a subpackage entered through its face (``faces.py``):
``switching`` (the device and one switch), ``admission`` (the scheduler), ``residency`` (who stays loaded),
``supervision`` (deaths, hangs, healing), ``runtime`` (vLLM's engines, the in-place swap and the warm launcher)
and ``strategies``. Left at the top: the manager and its status, the factory, errors, the report, observers and metrics.

The vLLM plugin that runs inside vLLM's processes is a package of its own (``server/vllm_plugin``), so this one
loads everything at once.
"""

from __future__ import annotations

from server.engine.engine_metrics import ENGINE_METRICS, VLLM_PREFIX, EngineMetrics
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
    ResidencyRefused,
    SwitchConflict,
    SwitchFailed,
)
from server.engine.factory import build_manager, prepare_profile
from server.engine.manager import BundleBuilder, EngineManager
from server.engine.memory import hlml_memory, nvml_memory
from server.engine.report import (
    EngineStart,
    ManagerSnapshot,
    ModelsReplaced,
    ResidencyReport,
    RestartPlan,
    SlotSnapshot,
    SwitchAttempt,
    SwitchReport,
)
from server.engine.residency import (
    MemoryBudgetExceeded,
    MemoryPlan,
    MemoryReading,
    ResidencyOutlook,
    residency_outlook,
)
from server.engine.runtime import (
    EngineConfigInvalid,
    EngineFlagsInvalid,
    StateDir,
    parse_engine_flags,
    state_dir,
    state_home,
)
from server.engine.strategies import Capabilities, StrategyUnavailable, capabilities_of, resolve_strategy_name
from server.engine.switching import PARKED, Lease, Published, Slot, SlotState
from server.vllm_plugin import kept_bytes_by_model

__all__ = [
    "ENGINE_METRICS",
    "PARKED",
    "VLLM_PREFIX",
    "AdmissionTimeout",
    "BundleBuilder",
    "Capabilities",
    "EngineConfigInvalid",
    "EngineDied",
    "EngineError",
    "EngineFlagsInvalid",
    "EngineManager",
    "EngineMetrics",
    "EngineStart",
    "Lease",
    "ManagerClosed",
    "ManagerSnapshot",
    "MemoryBudgetExceeded",
    "MemoryPlan",
    "MemoryReading",
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
    "ResidencyOutlook",
    "ResidencyRefused",
    "ResidencyReport",
    "RestartPlan",
    "Slot",
    "SlotSnapshot",
    "SlotState",
    "StateDir",
    "StrategyUnavailable",
    "SwitchAttempt",
    "SwitchConflict",
    "SwitchFailed",
    "SwitchReport",
    "build_manager",
    "capabilities_of",
    "hlml_memory",
    "kept_bytes_by_model",
    "nvml_memory",
    "parse_engine_flags",
    "prepare_profile",
    "residency_outlook",
    "resolve_strategy_name",
    "state_dir",
    "state_home",
]
