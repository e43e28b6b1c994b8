"""A reload's live replacement of the configured models (``EngineManager.replace_models``, ``turnout reload``).

The checks of the new profile come first, in the API layer (``server/api/reloader.py``); this is what the engine
does once they passed: one operation that holds the device, builds the active model's new bundle off to the side,
and swaps everything in at once (``device_reload.py``), or changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

from server.engine.admission import Admission
from server.engine.device import Device, describe_error
from server.engine.errors import ReloadFailed, ReloadRefused
from server.engine.kv_budget import MemoryPlan
from server.engine.report import ModelsReplaced
from server.engine.residency import Residency
from server.profiles.schema import ModelProfile, Switching

if TYPE_CHECKING:
    from server.engine.manager import BundleBuilder

__all__ = ["ModelsReload"]

B = TypeVar("B")


class ModelsReload(Generic[B]):
    """Replaces the configured models of one manager's device.

    Args:
        device: The device whose models change.
        admission: Told the new models, and that the device changed.
        residency: Told that the models changed (idle timers, preloads).
        switching: The switching section (its drain timeout bounds the wait for a switch under way).
        build_bundle: Builds the active model's new bundle over its running engine.
    """

    def __init__(
        self,
        device: Device[B],
        admission: Admission[B],
        residency: Residency[B],
        switching: Switching,
        build_bundle: BundleBuilder[B],
    ) -> None:
        self._device = device
        self._admission = admission
        self._residency = residency
        self._switching = switching
        self._build_bundle = build_bundle

    async def replace(
        self,
        models: Mapping[str, ModelProfile],
        *,
        new_frontend: Collection[str] = (),
        new_engine: Collection[str] = (),
        memory_plan: MemoryPlan | None = None,
        wait_timeout: float | None = None,
    ) -> ModelsReplaced:
        """Replace the configured models live, as one operation of the device.

        The reload waits (within ``wait_timeout``, default the drain timeout plus a minute) for a switch under way
        to end and holds the device meanwhile, so none starts; it then builds the active model's new bundle over
        its running engine when its frontend changed. Only when that worked is everything swapped in without an
        await in between: the profiles, the slots of added and removed models, the active model's new published
        snapshot, the memory plan and the strategy's view of the models. Requests in flight keep the snapshot
        they were admitted to, so they finish on the old bundle. Then the parked engines of removed models, and
        of models whose engine settings changed, are released. The active model's engine settings apply at its
        next load: a switch that parks it unloads it, whatever the strategy.

        Args:
            models: The new models, in profile order; must include the active model.
            new_frontend: Models whose frontend settings changed (their bundle is rebuilt).
            new_engine: Models whose engine settings changed.
            memory_plan: The new models' KV-cache budget (None: keep the current one).
            wait_timeout: Most seconds to wait for a switch under way.

        Raises:
            ReloadRefused: No switch-free moment came in time, or ``models`` lacks the active model.
            ReloadFailed: The active model's new bundle could not be built; nothing changed.
            ManagerClosed: The server is closing.
        """
        device = self._device
        timeout = self._switching.drain_timeout + 60.0 if wait_timeout is None else wait_timeout
        async with device.held_for_reload(timeout):
            active = device.active_model
            if active is not None and active not in models:
                raise ReloadRefused(f"The profile removes the active model '{active}'; switch to another model first.")
            bundle = None
            if active is not None and active in new_frontend:
                try:
                    bundle = await self._build_bundle(active, models[active], device.slots[active].engine)
                except Exception as exc:
                    raise ReloadFailed(active, describe_error(exc)) from exc
            released = device.replace_models(
                models,
                new_frontend=new_frontend,
                new_engine=new_engine,
                active_bundle=bundle,
                memory_plan=memory_plan if memory_plan is not None else device.memory_plan,
            )
            self._admission.set_models(device.models)
            for name, engine in released:
                await device.free_engine(name, engine)
        self._admission.device_changed()
        self._residency.models_changed()
        return ModelsReplaced(
            republished=bundle is not None,
            unloaded=[name for name, _ in released],
            engine_pending=device.stale,
        )
