"""Switch strategies: what happens to the model being left, and how the target comes up.

Each strategy is a module (``stop``, ``keep``, ``sleep``, ``reconfigure``, ``stash``) that meets the
:class:`~server.engine.types.SwitchStrategy` protocol and declares what it can do
(:class:`~server.engine.types.Capabilities`); ``select.py`` registers them and picks one for the host; callers read
capabilities, never a strategy's name. ``base.py`` is the common part of the strategies whose engines each belong
to one slot.
"""

from __future__ import annotations

from server.engine.strategies.keep import KeepStrategy
from server.engine.strategies.reconfigure import InPlaceSwapper
from server.engine.strategies.select import (
    STRATEGIES,
    StrategyChoice,
    StrategyUnavailable,
    capabilities_of,
    choose_strategy,
    models_held_at_once,
    resolve_strategy_name,
    select_strategy,
)
from server.engine.strategies.sleep import SleepStrategy
from server.engine.strategies.stash import StashStrategy
from server.engine.strategies.stop import StopStrategy

__all__ = [
    "STRATEGIES",
    "InPlaceSwapper",
    "KeepStrategy",
    "SleepStrategy",
    "StashStrategy",
    "StopStrategy",
    "StrategyChoice",
    "StrategyUnavailable",
    "capabilities_of",
    "choose_strategy",
    "models_held_at_once",
    "resolve_strategy_name",
    "select_strategy",
]
