"""What a switch reports, and the manager's status snapshot.

``SwitchReport`` keeps vLLM-Gaudi's ``ModelSwitchResponse`` fields unchanged, so clients of its switch route keep
working, and adds Turnout's extras (``drain_ms``, ``aborted_requests``, ``strategy``).
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from server.engine.types.memory_plan import MemoryPlan
from server.engine.types.proof import ProofPath, Verification
from server.profiles import describe_start

__all__ = [
    "ActivationMetrics",
    "EngineStart",
    "KeepFigures",
    "ManagerSnapshot",
    "ModelsReplaced",
    "ResidencyReport",
    "RestartPlan",
    "SlotSnapshot",
    "SwitchAttempt",
    "SwitchReport",
    "with_kept",
]


class EngineStart(msgspec.Struct, frozen=True, kw_only=True):
    """Where the time of one engine start went (``server/engine/runtime/start_phases.py`` measures and documents them).

    Attributes:
        started_at: Unix time the start began (its ``VllmConfig`` about to be built).
        total_ms: From then to the engine ready (vLLM's ``AsyncLLM`` built, its processes up).
        phases_ms: The phases, in the order they ran, each in whole ms; they add up to no more than
            ``total_ms``: ``config``, ``launch``, ``core_imports``, ``core_setup``, ``worker_imports``,
            ``worker_setup``, ``model_init``, ``weights``, ``post_weights``, ``kv_cache``, ``warmup``,
            ``compile``, ``ready``. A phase the engine did not report is left out; its time shows in the next.
        forked: The engine core was forked from the warm launcher (False: spawned, as vLLM does on its own).
        waited_ms: Before the start, the wait for the engine launcher's first warm-up (and the first config it
            starts with), outside ``total_ms``: a one-off of a server's first start, which a later reload does not
            pay, so the cost book leaves it out.
    """

    started_at: float
    total_ms: int
    phases_ms: dict[str, int]
    forked: bool = False
    waited_ms: int = 0

    def describe(self) -> str:
        """``3.4 s: config 10 ms, launch 200 ms, ...`` (the log line's and ``turnout status``'s words)."""
        return describe_start(self.total_ms, self.phases_ms)

    @property
    def path(self) -> ProofPath:
        """How the engine came up, as the proof names it: ``fork`` or ``plain`` (spawned)."""
        return "fork" if self.forked else "plain"


class ActivationMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """The switch timing and memory fields: what a strategy measures while it brings a model up, and the part of
    :class:`SwitchReport` they fill (the report is these plus the switch's own; each field is defined here once).

    Attributes:
        reconfigure_ms: Time spent deactivating the old model and activating the new one (a strategy that
            measures it itself, as vLLM-Gaudi's reconfigure does, gives its own; else the switch measures it).
        memory_before_mb: Device memory (on CPU: RSS of the engine processes) before the switch. A strategy's
            host that measured the device around its own unload gives these three figures instead of Turnout's
            probe around the park.
        memory_after_unload_mb: The same after the old model was parked or unloaded (for an in-place swap
            the workers keep the model until the load knows whether it can reuse it: nearly nothing is freed
            yet).
        freed_memory_mb: ``memory_before_mb - memory_after_unload_mb``.
        stash_memory_after_mb: Memory held by stashed models after the switch (stash strategy only).
        method: How the target came up: ``weights`` (in place, the same-shape target's weights copied into the
            loaded model), ``reconfigure`` (in place, same engine processes, the model built anew) or
            ``restart`` (a fresh engine); None for strategies that do not say.
        unload_ms: In-place unload of the old model: pause, and for ``reconfigure`` the workers' release and
            garbage collection (the workers keep the model until the load knows whether it can be reused).
        load_ms: In-place load of the target: model runner and weights.
        kv_cache_ms: In-place KV cache sizing and allocation, scheduler and prefix-cache hashing.
        frontend_ms: Refresh of the engine's frontend state (model config, renderer, processors).
        kept_blocks: Prefix-cache blocks of the model left kept in the pool (``switching.kv_keep_bytes``,
            ``reconfigure`` and ``stop``); None when it keeps none. They are restored on the model's next prompts
            that extend a kept prefix: vLLM counts those hits in ``vllm:external_prefix_cache_hits``.
        kept_bytes: Bytes written into the pool for them (blocks already kept cost nothing).
        keep_ms: Time the keep took (part of ``unload_ms`` in place; before the engine's shutdown under ``stop``).
        engine_start: The phases of the engine this switch started for the target (None when it started none:
            a wake-up, an in-place swap, a resident model, or an engine not started by vLLM's loader).
    """

    reconfigure_ms: float | None = None
    memory_before_mb: float | None = None
    memory_after_unload_mb: float | None = None
    freed_memory_mb: float | None = None
    stash_memory_after_mb: float | None = None
    method: str | None = None
    unload_ms: float | None = None
    load_ms: float | None = None
    kv_cache_ms: float | None = None
    frontend_ms: float | None = None
    kept_blocks: int | None = None
    kept_bytes: int | None = None
    keep_ms: float | None = None
    engine_start: EngineStart | None = None


class SwitchReport(ActivationMetrics, frozen=True, kw_only=True):
    """The outcome of one switch: the switch's own fields, and the timing and memory fields of
    :class:`ActivationMetrics` (defined there).

    Attributes:
        previous_model: The model that was active before (None at start-up).
        current_model: The model active now.
        switched: Whether the active model changed.
        duration_ms: Wall time of the whole switch, drain included.
        drain_ms: Time spent waiting for in-flight requests.
        aborted_requests: In-flight requests aborted when the drain timeout ran out.
        strategy: The strategy that parked the old model.
        verify: The proof of the model it published (``switching.verify``); None when none ran (``off``, a
            resident model, a plain start already on record).
    """

    previous_model: str | None
    current_model: str
    switched: bool
    duration_ms: float
    drain_ms: float = 0.0
    aborted_requests: int = 0
    strategy: str = ""
    verify: Verification | None = None


class KeepFigures(Protocol):
    """A keep's figures as the engine core answers them (``UnloadResult``, ``LoadResult``, ``KeptKV``)."""

    @property
    def kept_blocks(self) -> float: ...
    @property
    def kept_bytes(self) -> float: ...
    @property
    def keep_ms(self) -> float: ...


def with_kept(metrics: ActivationMetrics, *keeps: KeepFigures | None) -> ActivationMetrics:
    """``metrics`` with the keeps of one switch added up; unchanged when none kept anything (the pool is off)."""
    done = [keep for keep in keeps if keep is not None and (keep.kept_blocks or keep.keep_ms)]
    if not done:
        return metrics
    return msgspec.structs.replace(
        metrics,
        kept_blocks=int(sum(keep.kept_blocks for keep in done)),
        kept_bytes=int(sum(keep.kept_bytes for keep in done)),
        keep_ms=sum(keep.keep_ms for keep in done),
    )


class SwitchAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """One switch attempt, failed or not, as the admin status shows it (never sent to other clients).

    Attributes:
        source: The model active when it began (None at start-up).
        target: The model it was to activate.
        trigger: ``startup``, ``admin`` (the switch route) or ``auto`` (the scheduler).
        strategy: The strategy in use.
        outcome: ``ok`` or ``failed``.
        error: Why it failed (None when it did not).
        restored: After a failure, the model serving again (None: nothing serves).
        started_at: Unix time it began.
        duration_ms: Wall time it took.
    """

    source: str | None
    target: str
    trigger: str
    strategy: str
    outcome: str
    error: str | None = None
    restored: str | None = None
    started_at: float
    duration_ms: float


class ModelsReplaced(msgspec.Struct, frozen=True, kw_only=True):
    """What the manager did when a reload replaced its models.

    Attributes:
        republished: The active model got a new frontend bundle, published at once.
        unloaded: Models whose parked engine was released (removed, or their engine settings changed).
        engine_pending: Models still running an engine with their old engine settings (the active one); it is
            unloaded when a switch leaves it, so its next load applies them.
    """

    republished: bool
    unloaded: list[str]
    engine_pending: list[str]


class RestartPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What comes next for a model whose engine died and that has not served since (``supervision/healing.py``).

    Attributes:
        restarts: Restarts tried since the engine died (by the server, the scheduler or an admin switch).
        max_restarts: Manual mode: the most the server tries by itself (``switching.max_restarts``); None in
            auto mode, where the scheduler brings the model back whenever it is wanted.
        next_restart_in_s: Seconds until the next restart, when one waits out the failure backoff.
        restarting: A restart is under way.
        given_up: No restart comes by itself any more: the model stays failed until an admin switch or reload.
        note: The plan in words, for people: ``restart 2 of 3 in 10 s``, ``stays failed until a switch or
            reload``, ``restarts at its next request``.
    """

    restarts: int
    max_restarts: int | None = None
    next_restart_in_s: float | None = None
    restarting: bool = False
    given_up: bool = False
    note: str


class SlotSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One slot as the status route shows it.

    Attributes:
        queued: Auto mode: requests waiting for this model.
        retry_in_s: Auto mode: seconds until a model that failed to load is tried again (None: not backing off).
        pinned: The profile pins the model (never evicted nor unloaded when idle).
        unloads_in_s: Seconds until the idle timer unloads the model (None: it is not counting down).
        restart: The restart plan, while the model's engine is dead (None otherwise).
        pids: The engine's engine-core processes (empty without an engine): what an operator sends a signal to,
            or attaches a profiler to.
        last_start: The phases of the model's last engine start (None before its first, or when unmeasured); kept
            after the engine stops.
    """

    name: str
    model: str
    state: str
    reason: str | None
    in_flight: int
    max_model_len: int | None = None
    queued: int = 0
    retry_in_s: float | None = None
    pinned: bool = False
    unloads_in_s: float | None = None
    restart: RestartPlan | None = None
    pids: list[int] = msgspec.field(default_factory=list)
    last_start: EngineStart | None = None


class ResidencyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``POST /admin/models/{name}/load`` and ``/unload`` did.

    Attributes:
        model: The model loaded or unloaded.
        action: ``load`` or ``unload``.
        changed: False when there was nothing to do (already resident, already stopped).
        state: The model's slot state afterwards.
        active_model: The model serving afterwards (None after a forced unload of the active one).
        duration_ms: How long it took, the wait for a switch under way included.
    """

    model: str
    action: str
    changed: bool
    state: str
    active_model: str | None
    duration_ms: float


class ManagerSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The manager's state at one instant; ``memory`` is the KV-cache budget decided at start-up; ``faults``, the
    faults a drill armed (``turnout serve --inject-fault KIND:MODEL``), as ``KIND:MODEL``."""

    active_model: str | None
    switching_to: str | None
    mode: str
    strategy: str
    in_flight: int
    slots: list[SlotSnapshot]
    last_switch: SwitchReport | None
    last_attempt: SwitchAttempt | None = None
    recent_switches: list[SwitchAttempt] = msgspec.field(default_factory=list)
    memory: MemoryPlan | None = None
    #: Under a memory budget (``keep``): the footprints of the models holding an engine now; None otherwise.
    memory_held_bytes: int | None = None
    faults: list[str] = msgspec.field(default_factory=list)
