"""The engine manager: owns vLLM engines, gates requests and switches the active model.

A layer above ``profiles`` and ``vllm_plugin`` and beside ``frontend`` (see ``server/__init__.py``): it imports
neither the frontend nor Litestar, and knows a model's bundle only as the opaque value its :data:`BundleBuilder`
returns.

Its public names are all other packages import (``tests/test_layers.py``): the manager and what it reports, its
errors, the start-up steps the CLI and the Ray node run (:func:`prepare_profile`, :func:`build_manager`, the engine
flags and the memory plan), the counters the metrics read, the measured reload costs (:class:`CostBook`), the
simulation ``turnout simulate`` runs (:func:`simulate`) and this user's private state folder (:class:`StateDir`).
The modules behind them are the engine's own to move.
Importing it does not import vLLM (the engines import it when they start), so ``turnout serve`` refuses a bad
profile fast.

Inside, the engine is in packages by role, lowest first (each imports only those below it; ``docs/design.md`` draws
the order and ``tests/test_layers.py`` holds it): ``types`` (the plain data types and protocols the others share:
errors, reports, slot states, leases, change events, the scheduler's vocabulary, the memory plan, the strategy
protocol), ``residency`` (who may stay loaded, KV-cache sizes; pure), ``supervision`` (engine watches, healing),
``runtime`` (vLLM's engines, the in-place swap and the warm launcher), ``strategies``, ``switching`` (the model
slots and one switch) and ``admission`` (the scheduler). At the top: the residency controls, the manager and its
status, the factory; beside ``types``, the memory readings and the engine metrics.

The vLLM plugin that runs inside vLLM's processes is a package of its own (``server/vllm_plugin``), so this one
loads everything at once.
"""

from __future__ import annotations

from server.engine.engine_metrics import ENGINE_METRICS, VLLM_PREFIX, EngineMetrics
from server.engine.factory import build_manager, prepare_profile
from server.engine.manager import BundleBuilder, EngineManager
from server.engine.memory import hlml_memory, nvml_memory
from server.engine.residency import ResidencyOutlook, residency_outlook
from server.engine.runtime import (
    FAULTS,
    EngineConfigInvalid,
    EngineFlagsInvalid,
    StateDir,
    parse_engine_flags,
    parse_fault,
    state_dir,
    state_home,
)
from server.engine.simulation import (
    ASSUMED_COSTS,
    Outcome,
    SimulatedModel,
    Simulation,
    Tally,
    TraceInvalid,
    TraceRequest,
    read_trace,
    simulate,
    strongest_change,
)
from server.engine.strategies import StrategyUnavailable, capabilities_of, resolve_strategy_name
from server.engine.types import (
    PARKED,
    AdmissionTimeout,
    Capabilities,
    CostBook,
    CostsDocument,
    EngineDied,
    EngineError,
    EngineStart,
    Lease,
    ManagerClosed,
    ManagerSnapshot,
    MemoryBudgetExceeded,
    MemoryPlan,
    MemoryReading,
    ModelLoadFailed,
    ModelNotActive,
    ModelNotFound,
    ModelsReplaced,
    ModelSwitching,
    NoActiveModel,
    Published,
    ReloadFailed,
    ReloadRefused,
    RequestAbortedBySwitch,
    ResidencyRefused,
    ResidencyReport,
    RestartPlan,
    Slot,
    SlotSnapshot,
    SlotState,
    SwitchAttempt,
    SwitchConflict,
    SwitchFailed,
    SwitchReport,
    Verification,
    costs_schema,
)
from server.vllm_plugin import kept_bytes_by_model

__all__ = [
    "ASSUMED_COSTS",
    "ENGINE_METRICS",
    "FAULTS",
    "PARKED",
    "VLLM_PREFIX",
    "AdmissionTimeout",
    "BundleBuilder",
    "Capabilities",
    "CostBook",
    "CostsDocument",
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
    "Outcome",
    "Published",
    "ReloadFailed",
    "ReloadRefused",
    "RequestAbortedBySwitch",
    "ResidencyOutlook",
    "ResidencyRefused",
    "ResidencyReport",
    "RestartPlan",
    "SimulatedModel",
    "Simulation",
    "Slot",
    "SlotSnapshot",
    "SlotState",
    "StateDir",
    "StrategyUnavailable",
    "SwitchAttempt",
    "SwitchConflict",
    "SwitchFailed",
    "SwitchReport",
    "Tally",
    "TraceInvalid",
    "TraceRequest",
    "Verification",
    "build_manager",
    "capabilities_of",
    "costs_schema",
    "hlml_memory",
    "kept_bytes_by_model",
    "nvml_memory",
    "parse_engine_flags",
    "parse_fault",
    "prepare_profile",
    "read_trace",
    "residency_outlook",
    "resolve_strategy_name",
    "simulate",
    "state_dir",
    "state_home",
    "strongest_change",
]
