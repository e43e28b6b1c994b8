"""What a simulation (or a live replay) measured, per model and overall: the fields of ``turnout simulate --json``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec

__all__ = ["Figures", "Outcome", "Tally", "percentile"]


class Figures(msgspec.Struct, frozen=True, kw_only=True):
    """The figures of one model, or of all of them.

    Attributes:
        requests: Requests in the trace.
        switches: Switches to the model (overall: all of them).
        switch_s: Seconds those switches took, drain included.
        wait_p50_s: The median wait, from arrival to admission (admitted requests).
        wait_p99_s: The 99th percentile wait.
        wait_max_s: The longest wait.
        refused: Requests refused (a full queue, a wait past ``max_wait_s``).
        serving_share: The share of the run's time the device served the model (overall: served anything).
    """

    requests: int
    switches: int
    switch_s: float
    wait_p50_s: float
    wait_p99_s: float
    wait_max_s: float
    refused: int
    serving_share: float


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One policy's figures: overall, and per model."""

    overall: Figures
    models: dict[str, Figures]


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile of ``values`` (0 when there are none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


class Tally:
    """Counts a run's events per model and turns them into :class:`Outcome`."""

    def __init__(self, models: Iterable[str]) -> None:
        self.models = list(models)
        self.requests = dict.fromkeys(self.models, 0)
        self.waits: dict[str, list[float]] = {name: [] for name in self.models}
        self.refused = dict.fromkeys(self.models, 0)
        self.switches = dict.fromkeys(self.models, 0)
        self.switch_s = dict.fromkeys(self.models, 0.0)
        self.serving_s = dict.fromkeys(self.models, 0.0)
        self.any_serving_s = 0.0

    def outcome(self, duration_s: float) -> Outcome:
        """The figures of a run that lasted ``duration_s``."""
        span = max(duration_s, 1e-9)
        models = {
            name: _figures(
                self.requests[name],
                self.switches[name],
                self.switch_s[name],
                self.waits[name],
                self.refused[name],
                self.serving_s[name] / span,
            )
            for name in self.models
        }
        overall = _figures(
            sum(self.requests.values()),
            sum(self.switches.values()),
            sum(self.switch_s.values()),
            [wait for waits in self.waits.values() for wait in waits],
            sum(self.refused.values()),
            self.any_serving_s / span,
        )
        return Outcome(overall=overall, models=models)


def _figures(
    requests: int, switches: int, switch_s: float, waits: Sequence[float], refused: int, share: float
) -> Figures:
    return Figures(
        requests=requests,
        switches=switches,
        switch_s=round(switch_s, 3),
        wait_p50_s=round(percentile(waits, 0.5), 3),
        wait_p99_s=round(percentile(waits, 0.99), 3),
        wait_max_s=round(max(waits, default=0.0), 3),
        refused=refused,
        serving_share=round(share, 4),
    )
