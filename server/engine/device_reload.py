"""The device's reload side: holding it between switches (for a reload, a load or an unload), and a reload's
swap-in of the configured models.

Part of :class:`~server.engine.device.Device`, which inherits it: like the intents in ``device.py``, these are
the only code that changes the device's state (``tests/engine/test_device.py`` reads both modules for that).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from server.engine.change_signal import wait_set
from server.engine.device_views import ANY_STATE, DeviceViews
from server.engine.errors import EngineError, ManagerClosed, ReloadRefused, ResidencyRefused
from server.engine.kv_budget import MemoryPlan
from server.engine.states import PARKED, Slot, SlotState
from server.profiles.schema import ModelProfile

__all__ = ["DeviceReload"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")


class DeviceReload(DeviceViews[B]):
    """Holds the device between switches, and swaps a reload's models in; see :class:`~server.engine.device.Device`."""

    @asynccontextmanager
    async def held_for_reload(self, timeout: float) -> AsyncIterator[None]:
        """Hold the device between switches for a reload: no switch starts while it holds.

        Waits up to ``timeout`` for a switch under way to end (the scheduler starts none meanwhile).

        Raises:
            ReloadRefused: The device never became free, or another reload holds it.
            ManagerClosed: The server is closing.
        """
        async with self._held(timeout, "reload", ReloadRefused):
            yield

    @asynccontextmanager
    async def held_for_residency(self, timeout: float) -> AsyncIterator[None]:
        """Hold the device between switches to load or unload a model that is not switched to: as a reload
        holds it, so requests for the active model go on and no switch starts meanwhile.

        Raises:
            ResidencyRefused: The device never became free, or a reload, load or unload holds it.
            ManagerClosed: The server is closing.
        """
        async with self._held(timeout, "load or unload", ResidencyRefused):
            yield

    @asynccontextmanager
    async def _held(self, timeout: float, what: str, refused: type[EngineError]) -> AsyncIterator[None]:
        if self._reload_holds:
            raise refused(f"Another reload, load or unload is being applied; try the {what} again when it ends.")
        self._reload_holds = True
        try:
            deadline = asyncio.get_running_loop().time() + timeout
            while self._switch is not None:
                if self._closed:
                    raise ManagerClosed()
                changed = self.watch()
                if self._switch is None:
                    break
                if not await wait_set(changed, deadline - asyncio.get_running_loop().time()):
                    raise refused(
                        f"A switch to '{self._switch.target}' did not end within {timeout:g} s; {what} when it ends."
                    )
            if self._closed:
                raise ManagerClosed()
            yield
        finally:
            self._reload_holds = False
            self._changed()

    def replace_models(
        self,
        models: Mapping[str, ModelProfile],
        *,
        new_frontend: Collection[str],
        new_engine: Collection[str],
        active_bundle: B | None,
        memory_plan: MemoryPlan | None,
    ) -> list[tuple[str, Any]]:
        """Install ``models`` in one step (no await): slots, leases, profiles, the active model's new bundle and
        the memory plan change together. Returns ``(name, engine)`` of the engines that must be freed now.

        The caller holds the device (:meth:`held_for_reload`), so no switch runs; ``models`` keeps the active
        model, whose leases are the only ones in flight.
        """
        active = self.active_model
        if active is not None and active not in models:
            raise ReloadRefused(f"The profile removes the active model '{active}'; switch to another model first.")
        released: list[tuple[str, Any]] = []
        slots: dict[str, Slot] = {}
        for name, profile in models.items():
            slot = self._slots.get(name)
            if slot is None:
                slot = Slot(name, profile)
                self._leases[name] = set()
            elif name in new_engine and slot.state in PARKED:
                released.append((name, slot._detach()))
                slot._move(PARKED, SlotState.STOPPED)
                slot._set_profile(profile)
            else:
                slot._set_profile(profile)
                if name in new_frontend and name != active:
                    slot._drop_bundle()  # the next activation builds it anew
            slots[name] = slot
        for name, slot in self._slots.items():
            if name not in models:
                del self._leases[name]
                if slot.engine is not None:
                    released.append((name, slot._detach()))
                slot._move(ANY_STATE, SlotState.STOPPED)
        self._slots = slots
        if active is not None and active_bundle is not None:
            self._published = self._slots[active]._hold_bundle(active_bundle)
            logger.info("reload: published a new frontend bundle for %s", active)
        if active is not None and active in new_engine:
            self._stale.add(active)
        self._stale &= set(models)
        self._dead &= set(models)
        self._memory_plan = memory_plan
        self._strategy.models_changed(models)
        self._changed()
        return [(name, engine) for name, engine in released if engine is not None]
