"""Switching: the model slots, the leases in flight, and how the active model changes from one to another.

Public names: :class:`ModelSlots` (the one owner of the model slots, the leases in flight and the operation under
way: only it changes a slot), :class:`SwitchTasks` (a switch as the manager runs it), :class:`SwitchHistory` (what is
remembered of switches) and :class:`EngineDeaths` (what the model slots do when an engine dies). ``switch.py`` is
one switch step by step (drain, park, bring up, or roll back); ``change_signal.py`` how waiters hear of a change;
``verification.py`` a switch's proof of the model it publishes (:class:`ModelProof`), ``probe_agreement.py`` how
two probe readings are compared.
The slot states, leases and change events it publishes are plain types in :mod:`server.engine.types`.
"""

from __future__ import annotations

from server.engine.switching.engine_deaths import EngineDeaths
from server.engine.switching.history import SwitchHistory
from server.engine.switching.model_slots import UNLOADABLE, BundleBuilder, ModelSlots
from server.engine.switching.tasks import SwitchTasks
from server.engine.switching.verification import ModelProof, ProofFailed

__all__ = [
    "UNLOADABLE",
    "BundleBuilder",
    "EngineDeaths",
    "ModelProof",
    "ModelSlots",
    "ProofFailed",
    "SwitchHistory",
    "SwitchTasks",
]
