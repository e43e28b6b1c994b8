"""``/v1/models``' entries: OpenAI's model card with Turnout's fields, built here for one node and the cluster."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["model_card", "served_names"]


def served_names(name: str, aliases: Iterable[str]) -> list[str]:
    """A model's names in the list: its own, then each alias (``served_model_name``) other than it."""
    return [name, *(alias for alias in aliases if alias != name)]


def model_card(
    card_id: str, model: str, *, created: int, root: str | None, status: str, active: bool, **extra: Any
) -> dict[str, Any]:
    """One card: ``card_id`` is ``model``'s own name or another name of it (an alias, a LoRA adapter), whose
    ``parent`` is ``model``. ``root`` is the folder (None where the caller may not see it), ``status`` the slot's
    state and ``active`` whether the model serves now; ``extra`` adds the fields one side alone knows."""
    return {
        "id": card_id,
        "object": "model",
        "created": created,
        "owned_by": "turnout",
        "root": root,
        "parent": None if card_id == model else model,
        "permission": [],
        "status": status,
        "active": active,
        **extra,
    }
