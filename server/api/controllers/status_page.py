"""``GET /status``: the server at a glance, as a self-refreshing HTML page (jinja2, no JavaScript).

Everyone may see model states, request counts and the switch timeline, and the models' names unless a key is
configured (then only the admin sees them: the others see ``model 1``, ``model 2``, ..., so a key limited to some
models learns no other's name). Model paths and error details are shown only to a caller with the admin token (or
in dev mode without one): they may name files and internals. With ``switching.kv_keep_bytes``, the kept-KV pool's
bytes per model are read from the pool per view.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from litestar import Controller, MediaType, get
from litestar.di import NamedDependency
from litestar.response import Template

from server.api.admission import ServingBundle
from server.api.edge import Viewer
from server.engine import EngineManager, ManagerSnapshot, SlotSnapshot, SwitchAttempt, kept_bytes_by_model
from server.profiles import describe_size

__all__ = ["REFRESH_SECONDS", "StatusPageController"]

#: How often the page reloads itself.
REFRESH_SECONDS = 2


@dataclass(frozen=True)
class _ModelRow:
    name: str
    state: str
    active: bool
    in_flight: int
    queued: int | None
    retry_in_s: float | None
    restart: str | None
    path: str | None
    reason: str | None
    kept_kv: str | None = None


@dataclass(frozen=True)
class _SwitchRow:
    started: str
    source: str
    target: str
    trigger: str
    seconds: str
    outcome: str
    bar_percent: float
    error: str | None


def _model_rows(slots: list[SlotSnapshot], active: str | None, admin: bool, auto: bool) -> list[_ModelRow]:
    return [
        _ModelRow(
            name=slot.name,
            state=slot.state,
            active=slot.name == active,
            in_flight=slot.in_flight,
            queued=slot.queued if auto else None,  # only auto mode queues requests
            retry_in_s=slot.retry_in_s,
            restart=slot.restart.note if slot.restart is not None else None,  # the plan names no internals
            path=slot.model if admin else None,
            reason=slot.reason if admin else None,
        )
        for slot in slots
    ]


def _with_kept_kv(rows: list[_ModelRow]) -> tuple[list[_ModelRow], bool]:
    """The rows with what the kept-KV pool holds for each model, and whether there is a pool at all."""
    usage = kept_bytes_by_model([row.name for row in rows])
    if not usage:
        return rows, False
    return [replace(row, kept_kv=f"{usage.get(row.name, 0) / 2**20:.1f} MiB") for row in rows], True


def _switch_rows(attempts: list[SwitchAttempt], admin: bool) -> list[_SwitchRow]:
    longest = max((attempt.duration_ms for attempt in attempts), default=0.0) or 1.0
    return [
        _SwitchRow(
            started=time.strftime("%H:%M:%S", time.gmtime(attempt.started_at)),
            source=attempt.source or "(start-up)",
            target=attempt.target,
            trigger=attempt.trigger,
            seconds=f"{attempt.duration_ms / 1000:.2f}",
            outcome=attempt.outcome,
            # At least a sliver, so a 3 ms switch still shows on the timeline.
            bar_percent=round(max(attempt.duration_ms / longest * 100, 1.0), 1),
            error=attempt.error if admin else None,
        )
        for attempt in reversed(attempts)
    ]


def _numbered(names: list[str], viewer: Viewer) -> Callable[[Any], Any]:
    """Each model the viewer may not see named as ``model N`` (its place in the profile); other values as they are."""
    numbers = {name: f"model {index}" for index, name in enumerate(names, start=1) if not viewer.sees(name)}
    return lambda name: numbers.get(name, name) if isinstance(name, str) else name


def _memory_room(snapshot: ManagerSnapshot) -> str | None:
    """``3.0 GiB of 5.0 GiB held, 2.0 GiB left`` under a memory budget; None without one."""
    budget = snapshot.memory.budget_bytes if snapshot.memory is not None else None
    if budget is None or snapshot.memory_held_bytes is None:
        return None
    held = snapshot.memory_held_bytes
    return f"{describe_size(held)} of {describe_size(budget)} held, {describe_size(budget - held)} left"


class StatusPageController(Controller):
    """``/status``."""

    path = "/status"
    tags = ["Ops"]

    @get(media_type=MediaType.HTML)
    async def status_page(
        self,
        manager: NamedDependency[EngineManager[ServingBundle]],
        viewer: NamedDependency[Viewer],
    ) -> Template:
        """An HTML overview that refreshes itself; admin details only with the admin token, and model names (once
        a key is configured) only to the admin and to a key, its own."""
        admin = viewer.admin
        snapshot = manager.snapshot()
        models, kept_kv = _with_kept_kv(
            _model_rows(snapshot.slots, snapshot.active_model, admin, manager.switching.auto)
        )
        switches = _switch_rows(snapshot.recent_switches, admin)
        shown = _numbered([slot.name for slot in snapshot.slots], viewer)
        context = {
            "refresh_seconds": REFRESH_SECONDS,
            "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "admin": admin,
            "active_model": shown(snapshot.active_model),
            "switching_to": shown(snapshot.switching_to),
            "mode": snapshot.mode,
            "strategy": snapshot.strategy,
            "in_flight": snapshot.in_flight,
            "models": [replace(row, name=shown(row.name)) for row in models],
            "kept_kv": kept_kv,
            "switches": [replace(row, source=shown(row.source), target=shown(row.target)) for row in switches],
            "memory": _memory_room(snapshot) if admin else None,
        }
        return Template(template_name="status.html.jinja", context=context)
