"""Supervision: noticing that an engine died or hung, and the plan for bringing its model back.

``watch.py`` watches every engine (its process, its health round trips, its progress); ``progress.py`` reads the CPU
time an engine's processes use; ``healing.py`` restarts the model with backoff and gives the restart plan every
status surface shows. What the model slots do when a watch reports a death is ``switching/engine_deaths.py``'s (it
sits above this package and tells the healer).
"""

from __future__ import annotations

from server.engine.supervision.healing import Healer
from server.engine.supervision.watch import (
    EngineWatches,
    LoadTimedOut,
    Supervision,
    engine_is_dead,
    engine_pids,
    kill_process_trees,
)

__all__ = [
    "EngineWatches",
    "Healer",
    "LoadTimedOut",
    "Supervision",
    "engine_is_dead",
    "engine_pids",
    "kill_process_trees",
]
