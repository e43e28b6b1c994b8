"""The one resolver of the name a request gives its model: used by a node's admission and by the Ray ingress
before it places a request, so that both read a name the same way."""

from __future__ import annotations

from collections.abc import Mapping

from server.profiles import ModelProfile

__all__ = ["resolve_model_name"]


def resolve_model_name(models: Mapping[str, ModelProfile], requested: str | None) -> str | None:
    """The model a request names: a model's own name, one of its ``served_model_name`` aliases, or one of its
    LoRA adapters (``lora_modules``: the base model's bundle serves it, vLLM applies the adapter).

    An unknown name comes back as it is, for the caller's 404 to name it; None (no name) stays None.
    """
    if requested is None or requested in models:
        return requested
    for name, profile in models.items():
        if requested in profile.aliases or requested in (profile.lora_modules or {}):
            return name
    return requested
