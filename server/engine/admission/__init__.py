"""Admission: which requests run now, which wait, and which model gets the model slots next.

Public names: :class:`Admission`, the owner a request waits in, and :class:`Scheduler`, which the simulation
(``server/engine/simulation``) drives on a fake clock. ``scheduler.py`` decides, pure and synchronous, in
the vocabulary of :mod:`server.engine.types.scheduling` (policy, refusals, the views it reads and the effects it asks
for); ``gate.py`` is its asyncio side, where a request waits for admission. It sits above ``switching``: it reads
the model slots and hears of their changes through their change signal.
"""

from __future__ import annotations

from server.engine.admission.gate import Admission
from server.engine.admission.scheduler import Scheduler

__all__ = ["Admission", "Scheduler"]
