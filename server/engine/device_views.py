"""The device's fields and its read-only views: what the scheduler (its ``DeviceView``), the manager's snapshot, the
residency, the switch and the strategies read.

Nothing here changes the device's state. The intents that do are :class:`~server.engine.device.Device`'s (slot
intents, leases, the switch under way; ``device.py``) and those it inherits from ``device_reload.py`` (holding the
device between switches, a reload's swap-in), both built on this class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from server.engine.change_signal import ChangeSignal
from server.engine.kv_budget import MemoryPlan
from server.engine.lease import Lease, Published
from server.engine.report import SwitchReport
from server.engine.scheduling_types import SwitchView
from server.engine.states import PARKED, Slot, SlotState
from server.engine.strategies.base import SwitchStrategy
from server.profiles.schema import ModelProfile

__all__ = ["ANY_STATE", "DeviceViews", "SwitchUnderWay"]

B = TypeVar("B")

#: Every slot state: what an intent that may leave any state expects.
ANY_STATE = frozenset(SlotState)


@dataclass(frozen=True)
class SwitchUnderWay(SwitchView):
    """The switch under way: what the scheduler reads, and the task that runs it."""

    task: asyncio.Task[SwitchReport]


class DeviceViews(Generic[B]):
    """The device's state, read-only; :class:`~server.engine.device.Device` sets it up and changes it.

    Attributes (private: only the device's intents write them):
        _slots: The slots of the configured models, in profile order.
        _leases: The leases in flight, per model.
        _strategy: Frees the engines that slots give up; told the models.
        _memory_plan: The KV-cache budget the models run under.
        _published: The active model and its bundle.
        _switch: The switch under way (at most one).
        _reload_holds: Whether a reload, load or unload holds the device between switches.
        _stale: Models whose engine runs with settings a reload has since changed.
        _dead: Models whose engine died and that have not served since.
        _changes: The broadcast every change notifies.
        _closed: Whether the manager is shutting down.
    """

    _slots: dict[str, Slot]
    _leases: dict[str, set[Lease[B]]]
    _strategy: SwitchStrategy
    _memory_plan: MemoryPlan | None
    _published: Published[B] | None
    _switch: SwitchUnderWay | None
    _reload_holds: bool
    _stale: set[str]
    _dead: set[str]
    _changes: ChangeSignal
    _closed: bool

    @property
    def models(self) -> Mapping[str, ModelProfile]:
        """Every configured model, in profile order."""
        return {name: slot.profile for name, slot in self._slots.items()}

    @property
    def slots(self) -> Mapping[str, Slot]:
        """Every slot, in profile order (read-only: see :class:`Slot`)."""
        return dict(self._slots)

    @property
    def published(self) -> Published[B] | None:
        """The active model and its bundle, as one object."""
        return self._published

    @property
    def active_model(self) -> str | None:
        """The model that serves requests now, if any."""
        return self._published.model if self._published is not None else None

    @property
    def switch(self) -> SwitchUnderWay | None:
        """The switch under way, if any."""
        return self._switch

    @property
    def free(self) -> bool:
        """No switch runs and no reload holds the device."""
        return self._switch is None and not self._reload_holds

    @property
    def closed(self) -> bool:
        """Whether the manager is shutting down."""
        return self._closed

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The KV-cache budget the configured models run under."""
        return self._memory_plan

    @property
    def stale(self) -> list[str]:
        """Models whose engine runs with settings a reload has since changed (applied at their next load)."""
        return sorted(self._stale & set(self._slots))

    @property
    def dead(self) -> frozenset[str]:
        """Models whose engine died and that have not served since (their next activation is a restart)."""
        return frozenset(self._dead)

    def in_flight(self, model: str) -> int:
        """Requests admitted to ``model`` and not finished."""
        return len(self._leases.get(model, ()))

    def leases(self, model: str) -> list[Lease[B]]:
        """The leases in flight on ``model`` now (a copy)."""
        return list(self._leases.get(model, ()))

    def concurrency_limit(self, model: str) -> int | None:
        """The most requests ``model`` serves at once (its ``max_concurrent_requests``; None: no limit)."""
        slot = self._slots.get(model)
        return slot.profile.max_concurrent_requests if slot is not None else None

    def holder_of(self, engine: Any) -> str | None:
        """The model whose slot holds ``engine`` now (by identity: an in-place swap moves one engine between slots)."""
        return next(
            (slot.name for slot in self._slots.values() if slot.engine is not None and slot.engine is engine), None
        )

    def is_warm(self, model: str) -> bool:
        """Whether ``model`` is parked with its engine (comes back without an engine start)."""
        slot = self._slots.get(model)
        return slot is not None and slot.state in PARKED

    # -- change signal ----------------------------------------------------------------------------------------

    def watch(self) -> asyncio.Event:
        """An event set at the next change (take it before reading, so no change in between is missed)."""
        return self._changes.watch()

    async def wait_change(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the next change; False when none came."""
        return await self._changes.wait(timeout)

    def _changed(self) -> None:
        self._changes.notify()

    def __iter__(self) -> Iterator[Slot]:
        return iter(list(self._slots.values()))
