"""The strategies room: what happens to the model being left, and how the target comes up.

Each strategy is a module (``stop``, ``keep``, ``sleep``, ``reconfigure``, ``stash``) that declares what it can do
(``capabilities.py``); ``select.py`` registers them and picks one for a device; callers read capabilities, never a
strategy's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engine.faces import lazy_face

if TYPE_CHECKING:
    from server.engine.strategies.base import (
        Engine,
        EngineLoader,
        EngineLost,
        ResidentLoader,
        SleepableEngine,
        SwitchStrategy,
    )
    from server.engine.strategies.capabilities import Capabilities
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
    from server.engine.strategies.stash import StashHost, StashHostFactory, StashStrategy
    from server.engine.strategies.stop import StopStrategy
else:
    __getattr__ = lazy_face(__name__, __file__)

__all__ = [
    "STRATEGIES",
    "Capabilities",
    "Engine",
    "EngineLoader",
    "EngineLost",
    "InPlaceSwapper",
    "KeepStrategy",
    "ResidentLoader",
    "SleepStrategy",
    "SleepableEngine",
    "StashHost",
    "StashHostFactory",
    "StashStrategy",
    "StopStrategy",
    "StrategyChoice",
    "StrategyUnavailable",
    "SwitchStrategy",
    "capabilities_of",
    "choose_strategy",
    "models_held_at_once",
    "resolve_strategy_name",
    "select_strategy",
]
