"""The admission room: which requests run now, which wait, and which model gets the device next.

``scheduler.py`` decides, pure and synchronous; ``scheduling_types.py`` is its vocabulary (policy, refusals, the
views it reads and the effects it asks for); ``gate.py`` is its asyncio side, where a request waits for admission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engine.faces import lazy_face

if TYPE_CHECKING:
    from server.engine.admission.gate import Admission
    from server.engine.admission.scheduling_types import SchedulerPolicy, SwitchView
else:
    __getattr__ = lazy_face(__name__, __file__)

__all__ = [
    "Admission",
    "SchedulerPolicy",
    "SwitchView",
]
