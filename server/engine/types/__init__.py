"""The engine's shared vocabulary: plain data types and protocols that several engine packages read, and nothing
that acts.

It is the bottom of the engine (see ``docs/design.md``): it imports no other engine package, and every other one may
import it. A type belongs here when two packages need it; a type one package alone uses stays in that package.

Public names, by module:

* ``errors``: every error the engine raises to its callers (:class:`EngineError` and its kinds).
* ``report``: what the engine reports (:class:`SwitchReport`, :class:`ActivationMetrics`, snapshots, the restart
  plan).
* ``memory_plan``: the memory plan (:class:`MemoryPlan`, :class:`MemoryReading`, :class:`ModelShape`).
* ``lease`` and ``states``: a request's hold on a model (:class:`Lease`, :class:`Published`) and a model slot with
  its states and their one transition table (:class:`Slot`, :class:`SlotState`).
* ``changes``: what the model slots' owner tells its subscribers changed (:data:`Change`).
* ``reload_costs``: what bringing each model back costs, measured per path (:class:`CostBook`), which the
  residency policy weighs evictions with.
* ``scheduling``: the scheduler's policy and vocabulary (:class:`SchedulerPolicy`, :class:`SwitchView`, ...).
* ``strategy`` and ``capabilities``: the protocol a switch strategy meets, the engines it loads, and what it
  declares it can do.
* ``observer``: the protocol of the manager's observers (metrics, logs).
* ``proof``: what proving a switched model reads and reports (:class:`ProbeReading`, :class:`Verification`).
"""

from __future__ import annotations

from server.engine.types.capabilities import Capabilities
from server.engine.types.changes import Change, LeaseEnded, SwitchBegan, SwitchEnded
from server.engine.types.errors import (
    AdmissionTimeout,
    ConcurrencyLimit,
    EngineDied,
    EngineError,
    LoadFailed,
    ManagerClosed,
    ModelLoadFailed,
    ModelNotActive,
    ModelNotFound,
    ModelSwitching,
    NoActiveModel,
    QueueFull,
    ReloadFailed,
    ReloadRefused,
    RequestAbortedBySwitch,
    RequestAbortedByUnload,
    ResidencyRefused,
    SwitchConflict,
    SwitchFailed,
)
from server.engine.types.lease import AbortHook, Lease, Published
from server.engine.types.memory_plan import (
    DecisionSource,
    KvDecision,
    MemoryBudgetExceeded,
    MemoryPlan,
    MemoryReading,
    ModelShape,
)
from server.engine.types.observer import ManagerObserver, Observers
from server.engine.types.proof import (
    FIRST_FINGERPRINT,
    PROOF_PATHS,
    ModelProbe,
    ModelProver,
    ProbeReading,
    ProofOutcome,
    ProofPath,
    Verification,
)
from server.engine.types.reload_costs import (
    COSTS_FILE,
    CostBook,
    CostsDocument,
    CostStore,
    ModelCosts,
    PathCost,
    ReloadPath,
    costs_schema,
    reload_path,
)
from server.engine.types.report import (
    ActivationMetrics,
    EngineStart,
    KeepFigures,
    ManagerSnapshot,
    ModelsReplaced,
    ResidencyReport,
    RestartPlan,
    SlotSnapshot,
    SwitchAttempt,
    SwitchReport,
    with_kept,
)
from server.engine.types.scheduling import Refusal, SchedulerEffects, SchedulerPolicy, SlotsView, SwitchView, Waiter
from server.engine.types.states import PARKED, TRANSITIONS, IllegalTransition, Slot, SlotState
from server.engine.types.strategy import (
    BroughtUp,
    Engine,
    EngineLoader,
    EngineLost,
    Parked,
    ResidentLoader,
    SleepableEngine,
    SlotAccess,
    StashHost,
    StashHostFactory,
    SwitchStrategy,
)

__all__ = [
    "COSTS_FILE",
    "FIRST_FINGERPRINT",
    "PARKED",
    "PROOF_PATHS",
    "TRANSITIONS",
    "AbortHook",
    "ActivationMetrics",
    "AdmissionTimeout",
    "BroughtUp",
    "Capabilities",
    "Change",
    "ConcurrencyLimit",
    "CostBook",
    "CostStore",
    "CostsDocument",
    "DecisionSource",
    "Engine",
    "EngineDied",
    "EngineError",
    "EngineLoader",
    "EngineLost",
    "EngineStart",
    "IllegalTransition",
    "KeepFigures",
    "KvDecision",
    "Lease",
    "LeaseEnded",
    "LoadFailed",
    "ManagerClosed",
    "ManagerObserver",
    "ManagerSnapshot",
    "MemoryBudgetExceeded",
    "MemoryPlan",
    "MemoryReading",
    "ModelCosts",
    "ModelLoadFailed",
    "ModelNotActive",
    "ModelNotFound",
    "ModelProbe",
    "ModelProver",
    "ModelShape",
    "ModelSwitching",
    "ModelsReplaced",
    "NoActiveModel",
    "Observers",
    "Parked",
    "PathCost",
    "ProbeReading",
    "ProofOutcome",
    "ProofPath",
    "Published",
    "QueueFull",
    "Refusal",
    "ReloadFailed",
    "ReloadPath",
    "ReloadRefused",
    "RequestAbortedBySwitch",
    "RequestAbortedByUnload",
    "ResidencyRefused",
    "ResidencyReport",
    "ResidentLoader",
    "RestartPlan",
    "SchedulerEffects",
    "SchedulerPolicy",
    "SleepableEngine",
    "Slot",
    "SlotAccess",
    "SlotSnapshot",
    "SlotState",
    "SlotsView",
    "StashHost",
    "StashHostFactory",
    "SwitchAttempt",
    "SwitchBegan",
    "SwitchConflict",
    "SwitchEnded",
    "SwitchFailed",
    "SwitchReport",
    "SwitchStrategy",
    "SwitchView",
    "Verification",
    "Waiter",
    "costs_schema",
    "reload_path",
    "with_kept",
]
