"""``turnout simulate``'s engine: a recorded trace replayed through the real scheduler and the real residency
policy on a fake clock (``driver.py``), the trace's reader (``trace.py``) and the figures it reports
(``figures.py``), and which one change of the profile would move the outcome most (``what_if.py``). It imports
neither vLLM nor Ray."""

from __future__ import annotations

from server.engine.simulation.driver import ASSUMED_COSTS, OfflineOrder, SimulatedModel, Simulation, simulate
from server.engine.simulation.figures import Figures, Outcome, Tally, percentile
from server.engine.simulation.trace import TRACE_FIELDS, TraceInvalid, TraceRequest, parse_trace, read_trace
from server.engine.simulation.what_if import WhatIf, strongest_change

__all__ = [
    "ASSUMED_COSTS",
    "TRACE_FIELDS",
    "Figures",
    "OfflineOrder",
    "Outcome",
    "SimulatedModel",
    "Simulation",
    "Tally",
    "TraceInvalid",
    "TraceRequest",
    "WhatIf",
    "parse_trace",
    "percentile",
    "read_trace",
    "simulate",
    "strongest_change",
]
