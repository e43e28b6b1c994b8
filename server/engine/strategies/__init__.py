"""Switch strategies: what happens to the model being left, and how the target comes up."""

from server.engine.strategies.base import Engine, EngineLoader, SleepableEngine, SwitchStrategy
from server.engine.strategies.capabilities import Capabilities
from server.engine.strategies.keep import KeepStrategy
from server.engine.strategies.select import (
    STRATEGIES,
    StrategyChoice,
    StrategyUnavailable,
    capabilities_of,
    choose_strategy,
    resolve_strategy_name,
    select_strategy,
)
from server.engine.strategies.sleep import SleepStrategy
from server.engine.strategies.stash import StashHost, StashHostFactory, StashStrategy
from server.engine.strategies.stop import StopStrategy

__all__ = [
    "STRATEGIES",
    "Capabilities",
    "Engine",
    "EngineLoader",
    "KeepStrategy",
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
    "resolve_strategy_name",
    "select_strategy",
]
