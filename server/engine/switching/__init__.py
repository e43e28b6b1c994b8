"""The switching room: the device's state and how it moves from one model to another.

``device.py`` is the one owner of the model slots, the leases in flight and the operation under way (only it changes
a slot); ``states.py`` the slot states and their one table of legal transitions; ``lease.py`` a request's hold on a
model; ``change_signal.py`` how waiters hear of a change; ``switch.py`` one switch step by step (drain, park, bring up,
or roll back); ``tasks.py`` a switch as the manager runs it; ``history.py`` what is remembered of switches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engine.faces import lazy_face

if TYPE_CHECKING:
    from server.engine.switching.change_signal import Change, LeaseEnded, SwitchBegan, SwitchEnded
    from server.engine.switching.device import UNLOADABLE, BundleBuilder, Device
    from server.engine.switching.history import SwitchHistory
    from server.engine.switching.lease import Lease, Published
    from server.engine.switching.states import PARKED, Slot, SlotState
    from server.engine.switching.tasks import SwitchTasks
else:
    __getattr__ = lazy_face(__name__, __file__)

__all__ = [
    "PARKED",
    "UNLOADABLE",
    "BundleBuilder",
    "Change",
    "Device",
    "Lease",
    "LeaseEnded",
    "Published",
    "Slot",
    "SlotState",
    "SwitchBegan",
    "SwitchEnded",
    "SwitchHistory",
    "SwitchTasks",
]
