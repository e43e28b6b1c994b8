"""Whether two probe readings of one model agree, as vLLM's own tests compare two runs (``check_logprobs_close``).

Two healthy engines of one checkpoint may pick different greedy tokens only where the model hesitates: at the first
position the token ids differ, the recorded top-two logprob gap must be below a tolerance that fits the dtype (a
coin flip between two near-equal tokens), and both runs diverge from there on, so nothing after it is compared.
Where they agree, the chosen tokens' logprobs may drift by rounding only: healthy engines differ by about 0.01-0.02
in mean absolute logprob, stale or wrong weights by about 0.2 and more. A pooling model's vectors agree within a
cosine distance. The tolerances are per dtype: half precision rounds more than float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from server.engine.types import ProbeReading

__all__ = ["Agreement", "agreement", "tolerances"]


@dataclass(frozen=True)
class Tolerances:
    """How far two healthy readings may differ (see the module's docstring)."""

    #: A differing token is accepted where the recorded top-two gap is below this.
    top_two_gap: float
    #: The most the mean absolute logprob of the agreeing positions' chosen tokens may differ.
    mean_logprob: float
    #: The most a pooling model's vectors may differ in cosine distance.
    cosine_distance: float


_FULL: Final = Tolerances(top_two_gap=0.1, mean_logprob=0.05, cosine_distance=1e-4)
_HALF: Final = Tolerances(top_two_gap=0.3, mean_logprob=0.1, cosine_distance=1e-3)
#: Below 16 bits (quantized weights, fp8): rounding alone moves logprobs further.
_LOW: Final = Tolerances(top_two_gap=0.5, mean_logprob=0.2, cosine_distance=1e-2)


def tolerances(dtype: str) -> Tolerances:
    """The tolerances fitting ``dtype`` (``float32``, ``bfloat16``, ``float16``, ``fp8``, ...; unknown: half's)."""
    name = dtype.lower().removeprefix("torch.")
    if name in {"float32", "float", "fp32", "float64"}:
        return _FULL
    if "8" in name or "4" in name:
        return _LOW
    return _HALF


@dataclass(frozen=True)
class Agreement:
    """The comparison's verdict: whether the readings agree, and what was found, in words."""

    agrees: bool
    detail: str


def agreement(recorded: ProbeReading, observed: ProbeReading, dtype: str) -> Agreement:
    """Whether ``observed`` agrees with ``recorded`` within the tolerances of ``dtype``.

    Args:
        recorded: The reference (the fingerprint on record, or the plain start's reading).
        observed: The reading to judge; its top-two gaps are not read (the reference's are).
        dtype: The model's dtype, which sets the tolerances.
    """
    tol = tolerances(dtype)
    if recorded.vector is not None or observed.vector is not None:
        return _vectors(recorded.vector, observed.vector, tol)
    if not recorded.tokens or not observed.tokens:
        return Agreement(False, "one reading has no output tokens")
    drift: list[float] = []
    for position, (want, got) in enumerate(zip(recorded.tokens, observed.tokens, strict=False)):
        want_top, got_top = _at(recorded.top, position), _at(observed.top, position)
        if want != got:
            gap = _gap(want_top)
            if gap is not None and gap < tol.top_two_gap:
                break  # a near tie: healthy engines may pick either, and diverge from here on
            shown = "unknown" if gap is None else f"{gap:.3f}"
            return Agreement(
                False, f"token {position} is {got}, recorded {want} (recorded top-two gap {shown} >= {tol.top_two_gap})"
            )
        if want_top and got_top:
            drift.append(abs(want_top[0][1] - got_top[0][1]))
    else:
        if len(recorded.tokens) != len(observed.tokens):
            return Agreement(False, f"{len(observed.tokens)} output tokens, recorded {len(recorded.tokens)}")
    mean = sum(drift) / len(drift) if drift else 0.0
    if mean > tol.mean_logprob:
        return Agreement(False, f"mean |logprob| difference {mean:.3f} > {tol.mean_logprob}")
    return Agreement(True, f"{len(drift)} tokens agree, mean |logprob| difference {mean:.3f}")


def _at(top: Sequence[Sequence[tuple[int, float]]], position: int) -> Sequence[tuple[int, float]]:
    return top[position] if position < len(top) else ()


def _gap(top: Sequence[tuple[int, float]]) -> float | None:
    """The top-two logprob gap at one position (None when fewer than two were recorded)."""
    if len(top) < 2:
        return None
    return float(top[0][1]) - float(top[1][1])


def _vectors(recorded: Sequence[float] | None, observed: Sequence[float] | None, tol: Tolerances) -> Agreement:
    if recorded is None or observed is None or len(recorded) != len(observed) or not recorded:
        return Agreement(False, "the vectors differ in kind or length")
    dot = sum(a * b for a, b in zip(recorded, observed, strict=True))
    norms = math.sqrt(sum(a * a for a in recorded)) * math.sqrt(sum(b * b for b in observed))
    distance = 1.0 - dot / norms if norms else 1.0
    if distance > tol.cosine_distance:
        return Agreement(False, f"vector cosine distance {distance:.2e} > {tol.cosine_distance:g}")
    return Agreement(True, f"vector cosine distance {distance:.2e}")
