"""The cluster view: every replica's report merged into OpenAI's model list and the admin status."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from server.api import model_card, served_names
from server.engine import SlotState

__all__ = ["PREFERENCE", "merged_models", "replica_summaries"]

#: A model's best state across replicas: the first of these any replica has it in (else stopped).
PREFERENCE = (
    SlotState.ACTIVE,
    SlotState.DRAINING,
    SlotState.RESIDENT,
    SlotState.SLEEPING,
    SlotState.LOADING,
    SlotState.STASHED,
    SlotState.FAILED,
)


def _states(report: Mapping[str, Any]) -> dict[str, str]:
    manager = report["manager"]
    return {slot["name"]: slot["state"] for slot in manager["slots"]}


def _best(states: list[str]) -> str:
    for state in PREFERENCE:
        if state in states:
            return state
    return states[0] if states else SlotState.STOPPED


def merged_models(
    reports: Mapping[str, Mapping[str, Any]],
    created: int,
    *,
    sees: Callable[[str], bool] = lambda _: True,
    admin: bool = False,
) -> dict[str, Any]:
    """``/v1/models`` for the cluster: each model (and alias) once, its ``status`` the best across replicas,
    ``active`` where any replica serves it, and ``replicas`` each replica's state of it.

    As on one node: only the models the caller ``sees`` (a key limited to some sees those), and their folders
    (``root``) only to the ``admin``.
    """
    per_replica = {replica: _states(report) for replica, report in sorted(reports.items())}
    first = next(iter(reports.values()), None)
    cards: list[dict[str, Any]] = []
    if first is None:
        return {"object": "list", "data": cards}
    for name, path in first["models"].items():
        if not sees(name):
            continue
        states = {replica: states[name] for replica, states in per_replica.items() if name in states}
        status = _best(list(states.values()))
        cards += [
            model_card(
                card_id,
                name,
                created=created,
                root=path if admin else None,
                status=status,
                active=status == SlotState.ACTIVE,
                replicas=states,
            )
            for card_id in served_names(name, first["aliases"].get(name, []))
        ]
    return {"object": "list", "data": cards}


def replica_summaries(reports: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``/admin/status``'s replicas: what Ray holds on each (and which of those the manager unloaded, with why),
    its active model, its counters and full state."""
    return [
        {
            "replica": replica,
            "pid": report["pid"],
            "capacity": report["capacity"],
            "held": report["held"],
            "held_unloaded": report["held_unloaded"],
            "active_model": report["manager"]["active_model"],
            "loads": report["loads"],
            "evictions": report["evictions"],
            "counters": report["counters"],
            "manager": report["manager"],
        }
        for replica, report in sorted(reports.items())
    ]
