"""Residency controls: load and unload a model without switching to it, preload at start, unload when idle.

Each operation holds the device between switches (:meth:`Device.held_for_residency`, as a reload does): requests
for the active model go on, and no switch starts meanwhile. Slots change only through the device's intents, and
engines only through the strategy (``load_resident`` of a :class:`ResidentLoader`, ``unload``).

The idle timer is one asyncio task that sleeps until the next deadline or the next change of the device. A
model's last use is when a request for it was last admitted or ended (the scheduler's ``last_busy_at``) or when
it was parked or loaded, whichever is later; health, status and metrics never go through admission, so they
never count. Pinned models have no deadline, and in manual mode neither has the active model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Generic, TypeVar

from server.engine.admission import Admission
from server.engine.device import Device, describe_error
from server.engine.errors import (
    EngineError,
    LoadFailed,
    ManagerClosed,
    ModelNotFound,
    RequestAbortedByUnload,
    ResidencyRefused,
)
from server.engine.lease import Published
from server.engine.observer import ManagerObserver
from server.engine.report import ResidencyReport
from server.engine.states import SlotState
from server.engine.strategies.base import ResidentLoader, SwitchStrategy
from server.engine.switch import drain
from server.profiles.schema import Switching

__all__ = ["Residency"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")

#: States an unload frees without a drain: the engine is parked (a stashed slot's runner is the host's).
_UNLOADABLE = frozenset({SlotState.RESIDENT, SlotState.SLEEPING})
#: Longest sleep of the idle timer without a change of the device (a bound on a missed wake-up, not a poll).
_IDLE_CHECK_S = 30.0


class Residency(Generic[B]):
    """The manager's load, unload, preload and idle-unload operations.

    Args:
        device: The device's state (the one owner of the slots).
        strategy: Loads and frees the engines.
        admission: Told when the device is free again; its scheduler knows each model's last use.
        switching: The profile's switching section (mode, drain timeout, the default ``idle_unload_s``).
        observer: Told about idle unloads.
        publish: Builds (or reuses) the frontend bundle of a slot's engine, so a loaded model activates at once.
        abort_grace: Seconds aborted requests get to leave before an unloaded engine goes away.
        hold_timeout: Most seconds an operation waits for a switch under way to end.
    """

    def __init__(
        self,
        device: Device[B],
        strategy: SwitchStrategy,
        admission: Admission[B],
        switching: Switching,
        observer: ManagerObserver,
        publish: Callable[[str], Awaitable[Published[B]]],
        *,
        abort_grace: float,
        hold_timeout: float,
    ) -> None:
        self._device = device
        self._strategy = strategy
        self._admission = admission
        self._switching = switching
        self._observer = observer
        self._publish = publish
        self._abort_grace = abort_grace
        self._hold_timeout = hold_timeout
        self._tasks: list[asyncio.Task[None]] = []
        self._idle_task: asyncio.Task[None] | None = None
        self._retry_at: dict[str, float] = {}  # an idle unload that did not happen waits this long to retry

    # -- lifecycle ------------------------------------------------------------------------------------------

    def started(self) -> None:
        """The default model serves: preload the models marked so, and run the idle timer where one is set."""
        preloads = [name for name, profile in self._device.models.items() if profile.preload]
        if preloads:
            self._tasks.append(asyncio.get_running_loop().create_task(self._preload(preloads)))
        self.models_changed()

    def models_changed(self) -> None:
        """The configured models may have changed (a reload): start the idle timer if a model now has one."""
        if self._idle_task is None and any(self._ttl(name) is not None for name in self._device.models):
            self._idle_task = asyncio.get_running_loop().create_task(self._idle_loop())
            self._tasks.append(self._idle_task)

    async def close(self) -> None:
        """Stop the preloads and the idle timer (shutdown)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(BaseException):
                await task
        self._tasks.clear()
        self._idle_task = None

    # -- operations -----------------------------------------------------------------------------------------

    async def load(self, name: str, *, preload: bool = False) -> ResidencyReport:
        """Make ``name`` resident without activating it (a no-op when it holds an engine already).

        Raises:
            ModelNotFound: ``name`` is not configured.
            ResidencyRefused: The strategy holds one engine at a time, or has no room within its limits.
            LoadFailed: The engine did not start (the slot is marked failed with the reason).
            ManagerClosed: The server is closing.
        """
        self._check(name)
        started = time.perf_counter()
        try:
            async with self._device.held_for_residency(self._hold_timeout):
                changed = await self._load_held(name, preload=preload)
        finally:
            self._admission.device_changed()
        return self._report(name, "load", changed, started)

    async def unload(self, name: str, *, force: bool = False, drain_timeout: float | None = None) -> ResidencyReport:
        """Free ``name``'s engine; a failed slot is cleared to stopped.

        The active model is unloaded only in auto mode or with ``force``: it is drained as a switch drains it
        (then its requests are aborted with a retryable error), and no model is active afterwards.

        Raises:
            ModelNotFound: ``name`` is not configured.
            ResidencyRefused: ``name`` is active in manual mode without ``force``, or stashed.
            ManagerClosed: The server is closing.
        """
        self._check(name)
        started = time.perf_counter()
        timeout = self._switching.drain_timeout if drain_timeout is None else drain_timeout
        try:
            async with self._device.held_for_residency(self._hold_timeout):
                changed = await self._unload_held(name, force=force, drain_timeout=timeout)
        finally:
            self._admission.device_changed()
        return self._report(name, "unload", changed, started)

    def unloads_in(self, name: str, now: float) -> float | None:
        """Seconds until the idle timer unloads ``name`` (None: it is not counting down)."""
        deadline = self._deadline(name)
        return None if deadline is None else round(max(0.0, deadline - now), 1)

    # -- under the hold -------------------------------------------------------------------------------------

    async def _load_held(self, name: str, *, preload: bool) -> bool:
        device = self._device
        slot = device.slots[name]
        if slot.state is SlotState.ACTIVE or slot.engine is not None or slot.state is SlotState.STASHED:
            return False
        strategy = self._strategy
        refusal = None
        if not isinstance(strategy, ResidentLoader):
            refusal = ResidencyRefused(
                f"The '{strategy.name}' strategy holds one engine at a time, so '{name}' cannot be loaded next "
                f"to the active model; switch to it instead (POST /v1/models/switch)."
            )
        if refusal is not None and not preload:
            raise refusal  # the slot stays as it is, a failure's reason included
        device.start_loading(name)
        try:
            if refusal is not None:
                raise refusal
            assert isinstance(strategy, ResidentLoader)
            engine = await strategy.load_resident(name, slot.profile, device.room_for(name))
            device.brought_up(name, engine)
            await self._publish(name)  # the bundle too, so that switching to it is only a pointer swap
        except ResidencyRefused as exc:
            if preload:  # the profile asks for what cannot be: shown like a failed load
                device.failed(name, f"preload refused: {exc.message}")
            else:
                device.stopped(name, frozenset({SlotState.LOADING}))
            raise
        except Exception as exc:
            reason = describe_error(exc)
            logger.error("loading %s failed: %s", name, reason)
            await device.free_engine(name, device.failed(name, reason))
            raise LoadFailed(name, reason) from exc
        device.loaded_resident(name)
        logger.info("%s is loaded and resident", name)
        return True

    async def _unload_held(self, name: str, *, force: bool, drain_timeout: float) -> bool:
        device = self._device
        state = device.slots[name].state
        if state is SlotState.STOPPED:
            return False
        if state is SlotState.FAILED:
            device.stopped(name, frozenset({SlotState.FAILED}))  # clears the failure; nothing runs
            return True
        if state in _UNLOADABLE:
            await device.unload(name, _UNLOADABLE)
            return True
        if state is not SlotState.ACTIVE:
            raise ResidencyRefused(f"'{name}' is {state}; the strategy that holds it frees it at its next switch.")
        if self._switching.mode == "manual" and not force:
            raise ResidencyRefused(
                f"'{name}' is the active model; unload it with force (its requests get retryable errors and no "
                "model is active until the next switch), or switch to another model first."
            )
        device.unpublish(name)
        await drain(device, name, drain_timeout, self._abort_grace, RequestAbortedByUnload(name), "for its unload")
        await device.unload(name, frozenset({SlotState.DRAINING}))
        return True

    # -- preload and the idle timer -------------------------------------------------------------------------

    async def _preload(self, names: list[str]) -> None:
        for name in names:
            try:
                report = await self.load(name, preload=True)
            except ManagerClosed:
                return
            except EngineError as exc:
                logger.error("preloading %s failed: %s", name, exc.message)
                continue
            if report.changed:
                logger.info("preloaded %s in %.0f ms", name, report.duration_ms)

    async def _idle_loop(self) -> None:
        device = self._device
        while not device.closed:
            now = time.monotonic()
            for name in list(device.models):
                deadline = self._deadline(name)
                if deadline is not None and deadline <= now and device.free:
                    await self._idle_unload(name)
            deadlines = [d for name in device.models if (d := self._deadline(name)) is not None]
            wait = min([max(0.05, d - time.monotonic()) for d in deadlines], default=_IDLE_CHECK_S)
            await device.wait_change(min(wait, _IDLE_CHECK_S))

    async def _idle_unload(self, name: str) -> None:
        ttl = self._ttl(name)
        logger.info("%s served nothing for %s s: unloading it", name, f"{ttl:g}" if ttl is not None else "?")
        try:
            async with self._device.held_for_residency(self._hold_timeout):
                deadline = self._deadline(name)  # a request may have come while the hold began
                if deadline is None or deadline > time.monotonic():
                    return
                changed = await self._unload_held(name, force=True, drain_timeout=self._switching.drain_timeout)
        except EngineError as exc:
            logger.warning("idle unload of %s did not happen: %s", name, exc.message)
            self._retry_at[name] = time.monotonic() + _IDLE_CHECK_S
            return
        finally:
            self._admission.device_changed()
        if changed:
            self._observer.model_idle_unloaded(name)

    def _ttl(self, name: str) -> float | None:
        profile = self._device.models[name]
        if profile.pinned:
            return None
        return profile.idle_unload_s if profile.idle_unload_s is not None else self._switching.idle_unload_s

    def _deadline(self, name: str) -> float | None:
        """When the idle timer unloads ``name`` (monotonic), or None."""
        device, scheduler = self._device, self._admission.scheduler
        slot = device.slots.get(name)
        ttl = self._ttl(name) if slot is not None else None
        if slot is None or ttl is None:
            return None
        if slot.state in _UNLOADABLE:
            since = slot.last_active
        elif (
            slot.state is SlotState.ACTIVE
            and self._switching.mode == "auto"
            and device.switch is None
            and device.in_flight(name) == 0
            and scheduler.queue_depth(name) == 0
        ):
            since = scheduler.active_since
        else:
            return None
        return max(since + ttl, scheduler.last_busy_at(name) + ttl, self._retry_at.get(name, 0.0))

    # -- helpers --------------------------------------------------------------------------------------------

    def _check(self, name: str) -> None:
        if name not in self._device.models:
            raise ModelNotFound(name, self._device.models)
        if self._device.closed:
            raise ManagerClosed()

    def _report(self, name: str, action: str, changed: bool, started: float) -> ResidencyReport:
        return ResidencyReport(
            model=name,
            action=action,
            changed=changed,
            state=self._device.slots[name].state.value,
            active_model=self._device.active_model,
            duration_ms=round((time.perf_counter() - started) * 1000.0, 1),
        )
