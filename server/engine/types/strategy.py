"""The contracts between the model slots' owner, the strategies and the engines they load.

The model slots (:class:`ModelSlots`) decide *when* a model is parked or brought up, and their owner is the only
code that changes a slot; a strategy decides *how*, as operations on engines that return results. A strategy never
sees a slot it may change: it gets a model's name, profile and engine, and answers what the slot should hold next.
Where it needs room for another engine (``keep``), it asks the model slots through :class:`SlotAccess`. All engine
creation goes through an
:class:`EngineLoader`, so the switch logic is tested against fakes and the real vLLM loader lives in one module
(``server/engine/runtime/vllm_loader.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from server.engine.types.capabilities import Capabilities
from server.engine.types.proof import ProofPath
from server.engine.types.report import ActivationMetrics, KeepFigures
from server.engine.types.states import Slot, SlotState
from server.profiles.schema import ModelProfile

__all__ = [
    "BroughtUp",
    "Engine",
    "EngineLoader",
    "EngineLost",
    "Parked",
    "ResidentLoader",
    "SleepableEngine",
    "SlotAccess",
    "StashHost",
    "StashHostFactory",
    "SwitchStrategy",
]


@runtime_checkable
class Engine(Protocol):
    """The part of vLLM's ``AsyncLLM`` the manager uses."""

    async def abort(self, request_id: str | Iterable[str]) -> None:
        """Abort requests by id."""


@runtime_checkable
class SleepableEngine(Engine, Protocol):
    """``AsyncLLM`` with sleep mode (vLLM: ``sleep(level)``, ``wake_up(tags)``, ``collective_rpc``)."""

    async def sleep(self, level: int = 1) -> None:
        """Offload (level 1) or discard (level 2) the weights and drop the KV cache."""

    async def wake_up(self, tags: list[str] | None = None) -> Any:
        """Bring back the parts named by ``tags`` (all when None)."""

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = ()) -> Any:
        """Run ``method`` on every worker (level 2 uses ``reload_weights``)."""


class EngineLoader(Protocol):
    """Creates and destroys engines for models of the profile."""

    async def load(self, name: str, model: ModelProfile, *, sleep_mode: bool = False) -> Any:
        """Start an engine for ``model``; raise on any failure (nothing may be left running then)."""

    async def unload(self, engine: Any) -> KeepFigures | None:
        """Shut ``engine`` down and free its memory; what it kept of its prefix blocks first (None: nothing)."""


@dataclass(frozen=True)
class Parked:
    """What a drained model's slot holds after :meth:`SwitchStrategy.park`: its new state and engine (or None)."""

    state: SlotState
    engine: Any = None


@dataclass(frozen=True)
class BroughtUp:
    """A model brought up: the live engine its slot now holds, and how it came up.

    ``path``: the fast path that changed a live engine, which a switch proves before it publishes the model
    (``in_place``, ``wake``, ``restore``); None for an engine the strategy started (the model slots read ``fork``
    or ``plain`` off its start) or one already serving (a resident model, proven when it came up).
    """

    engine: Any
    metrics: ActivationMetrics | None = None
    path: ProofPath | None = None


class EngineLost(RuntimeError):
    """Parking failed and took the engine with it (an unload that reported an error): the switch goes on."""


class SlotAccess(Protocol):
    """What a strategy may read and ask of the model slots (:class:`ModelSlots` owns them) while it makes room
    for one more engine: the models, the slots holding engines, and evictions; only the owner changes the slots."""

    @property
    def models(self) -> Mapping[str, ModelProfile]:
        """Every configured model, in profile order (the slots' one model list, as it is now)."""

    def residents(self) -> Sequence[Slot]:
        """The parked slots other than the target that may go, in the residency policy's order (least recently used
        first, never a pinned one: ``residency/policy.py``)."""

    def engines_held(self) -> int:
        """Engines held by slots other than the target."""

    def holders(self) -> Sequence[Slot]:
        """Every slot other than the target that holds an engine (busy and pinned ones included)."""

    async def evict(self, name: str, reason: str | None = None) -> None:
        """Stop ``name`` (a resident) and unload its engine; ``reason`` stays on its stopped slot for the status."""

    def take_engine(self, name: str) -> Any:
        """Stop ``name`` (a resident) and hand its engine over, to be loaded with the target in place."""


class SwitchStrategy(Protocol):
    """What happens to the model being left, and how the target is brought up.

    ``bring_up`` leaves an engine live and ready to generate, or raises after freeing whatever it loaded or took
    (the engine the slot held before stays the caller's to release). ``park`` returns what the slot keeps, and
    raises :class:`EngineLost` when it failed and the engine is gone anyway (any other error: the engine is intact
    and the model stays active). ``unload`` frees an engine a slot gave up (eviction, failure, shutdown).
    ``close`` frees what the strategy itself holds, once, after every slot
    is released at shutdown.
    """

    name: str
    capabilities: ClassVar[Capabilities]

    async def park(self, name: str, engine: Any) -> Parked:
        """Park the drained model ``name``, whose slot holds ``engine``."""

    async def bring_up(self, name: str, profile: ModelProfile, held: Any, slots: SlotAccess) -> BroughtUp:
        """Bring ``name`` up; ``held`` is the engine its slot holds (parked) or None."""

    async def unload(self, name: str, engine: Any) -> None:
        """Free ``engine``, which ``name``'s slot no longer holds."""

    async def close(self) -> None:
        """Free what the strategy holds besides the slots' engines (manager shutdown)."""


@runtime_checkable
class ResidentLoader(Protocol):
    """A strategy that can hold engines besides the active one and so load a model without activating it
    (``turnout load``, ``preload``). The others answer such a load with a refusal that says why."""

    async def load_resident(self, name: str, profile: ModelProfile, slots: SlotAccess) -> Any:
        """Start an engine for ``name``, making room as a switch would; return it.

        Raises:
            ResidencyRefused: No room can be made within the strategy's limits (nothing was loaded).
        """


class StashHost(Protocol):
    """The part of vLLM-Gaudi's ``MultiModelAsyncLLM`` Turnout uses (the ``stash`` strategy's one engine)."""

    @property
    def engine(self) -> Any:
        """The host's one engine."""

    @property
    def current_model(self) -> str | None:
        """The model the host says it holds."""

    async def switch_model(self, model: str, drain_timeout: int = 60) -> Mapping[str, Any] | None:
        """Reconfigure the engine core to ``model``.

        Returns ``switched``, ``drain_s``, ``reconfigure_s``, ``switch_s`` and, from the engine core, the device
        memory figures (each None where the workers cannot read it). Raises ``ValueError`` for an alias it was
        not built with, ``RuntimeError`` when not initialized or when the switch failed.
        """

    def shutdown(self) -> None:
        """Stop the engine; ``current_model`` is None afterwards."""


#: Builds and initializes the host over the given models, with the first model loaded.
StashHostFactory = Callable[[str, Mapping[str, ModelProfile]], Awaitable[StashHost]]
