"""Admission: which requests run now, which wait, and which model gets the model slots next.

Public name: :class:`Admission`, the owner a request waits in. ``scheduler.py`` decides, pure and synchronous, in
the vocabulary of :mod:`server.engine.types.scheduling` (policy, refusals, the views it reads and the effects it asks
for); ``gate.py`` is its asyncio side, where a request waits for admission. It sits above ``switching``: it reads
the model slots and hears of their changes through their change signal.
"""

from __future__ import annotations

from server.engine.admission.gate import Admission

__all__ = ["Admission"]
