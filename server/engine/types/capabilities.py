"""What a switch strategy can do, declared by the strategy itself: callers read these, never its name.

Adding a strategy is its module (a class with a ``name`` and these ``capabilities``) and one line in
``select.py``'s registry; nothing outside ``strategies/`` changes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """What a strategy does with the models it leaves and how many it serves.

    Attributes:
        holds_left_model: A model it leaves stays loaded (resident, asleep or stashed) and comes back without an
            engine start; without it the device holds one model at a time.
        serves_several: Several models serve at once, each in its own engine, up to ``max_active`` and the memory
            budget: their KV caches are budgeted to fit together, and a Ray replica loads a model beside the others.
        budgets_bytes: The profile's ``memory_budget`` (bytes) decides which models stay resident.
        loads_without_activating: ``turnout load`` and ``preload`` start a model's engine beside the active one
            (the strategy implements ``ResidentLoader``); the others refuse such a load and say why.
        swaps_in_place: The target is brought up inside the running engine (``reconfigure``): engines start with
            the in-place worker extension.
    """

    holds_left_model: bool = False
    serves_several: bool = False
    budgets_bytes: bool = False
    loads_without_activating: bool = False
    swaps_in_place: bool = False
