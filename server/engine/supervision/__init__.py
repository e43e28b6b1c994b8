"""The supervision room: noticing that an engine died or hung, and bringing its model back.

``watch.py`` watches every engine (its process, its health round trips, its progress); ``progress.py`` reads the CPU
time an engine's processes use; ``death.py`` is what the manager does when a watch reports a death; ``healing.py``
restarts the model with backoff and gives the restart plan every status surface shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engine.faces import lazy_face

if TYPE_CHECKING:
    from server.engine.supervision.death import EngineDeaths
    from server.engine.supervision.healing import Healer
    from server.engine.supervision.watch import (
        EngineWatches,
        LoadTimedOut,
        Supervision,
        engine_pids,
        kill_process_trees,
    )
else:
    __getattr__ = lazy_face(__name__, __file__)

__all__ = [
    "EngineDeaths",
    "EngineWatches",
    "Healer",
    "LoadTimedOut",
    "Supervision",
    "engine_pids",
    "kill_process_trees",
]
