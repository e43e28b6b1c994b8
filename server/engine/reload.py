"""A live reload's steps around the manager's swap-in (``EngineManager.replace_models``, ``turnout reload``).

Before: is a reload allowed now, and the active model's new bundle, built over its running engine. After: the
engines that run with settings the reload changed, unloaded once a switch parks them. The swap-in itself is the
manager's (it must not await) and ``model_set.py``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, TypeVar

from server.engine.errors import ManagerClosed, ReloadFailed, ReloadRefused
from server.engine.lease import Published
from server.engine.model_set import PARKED, release_slot
from server.engine.states import Slot
from server.engine.strategies.base import SwitchStrategy
from server.engine.switch import describe_error
from server.profiles.schema import ModelProfile

__all__ = ["StaleEngines", "check_reloadable", "rebuild_active_bundle"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")


def check_reloadable(
    models: Mapping[str, ModelProfile], *, closed: bool, switching_to: str | None, published: Published[B] | None
) -> Published[B] | None:
    """The published snapshot a reload to ``models`` starts from.

    Raises:
        ManagerClosed: The server is closing.
        ReloadRefused: A switch is under way, or ``models`` lacks the active model.
    """
    if closed:
        raise ManagerClosed()
    if switching_to is not None:
        raise ReloadRefused(f"A switch to '{switching_to}' is under way; reload when it ends.")
    if published is not None and published.model not in models:
        raise ReloadRefused(f"The profile removes the active model '{published.model}'; switch to another model first.")
    return published


async def rebuild_active_bundle(
    published: Published[B] | None,
    models: Mapping[str, ModelProfile],
    new_frontend: Collection[str],
    slots: Mapping[str, Slot],
    build_bundle: Callable[[str, ModelProfile, Any], Awaitable[B]],
) -> B | None:
    """The active model's new bundle over its running engine, or None when its frontend did not change.

    Raises:
        ReloadFailed: The bundle could not be built.
    """
    if published is None or published.model not in new_frontend:
        return None
    try:
        return await build_bundle(published.model, models[published.model], slots[published.model].engine)
    except Exception as exc:
        raise ReloadFailed(published.model, describe_error(exc)) from exc


class StaleEngines:
    """Models whose engine runs with settings a reload has since changed: unloaded once a switch parks them."""

    def __init__(self) -> None:
        self._names: set[str] = set()

    def mark(self, model: str) -> None:
        """``model``'s engine settings changed while it was active."""
        self._names.add(model)

    def keep_only(self, models: Collection[str]) -> None:
        """Forget the models a reload removed."""
        self._names &= set(models)

    def pending(self, models: Collection[str]) -> list[str]:
        """The configured models whose new engine settings wait for their next load, sorted."""
        return sorted(self._names & set(models))

    async def unload_parked(self, slots: Mapping[str, Slot], strategy: SwitchStrategy) -> None:
        """Unload the stale engines that a switch has parked (called after every switch)."""
        for name in sorted(self._names):
            slot = slots.get(name)
            if slot is None or slot.engine is None:
                self._names.discard(name)
            elif slot.state in PARKED:
                logger.info("unloading %s: a reload changed its engine settings", name)
                await release_slot(slot, strategy)
                self._names.discard(name)
