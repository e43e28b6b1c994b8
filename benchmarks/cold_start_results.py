"""The cold-start result (``benchmarks/results/cold_start*.json``) and its arithmetic: medians, the two goal ratios,
the printed table, the switch report's phases and the docs page's section.

Nothing here starts a server (``benchmarks/cold_start.py`` measures), so it is tested on made-up rounds.

A file written before Turnout's side was measured holds vLLM's rounds only; it still decodes (the Turnout fields
default to empty) and the page then shows vLLM's figures alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from benchmarks.result_types import Base, Result
from benchmarks.results import median

__all__ = [
    "GOALS",
    "LABELS",
    "ColdStart",
    "ColdStartConfig",
    "ColdStartOptions",
    "ColdStartRound",
    "GoalRatio",
    "TurnoutColdFigures",
    "TurnoutColdRound",
    "judge",
    "page_section",
    "phase_medians",
    "report_phases",
    "result_name",
    "table_lines",
    "turnout_medians",
    "vllm_medians",
]

#: Issue 40's goals, each a ratio that must be at most its limit.
SWITCH_GOAL = "stop switch to first token / vLLM cold start to first token"
START_GOAL = "Turnout start to /ready / vLLM start to /health"
GOALS: dict[str, float] = {SWITCH_GOAL: 0.25, START_GOAL: 1.0}
#: How the page names a labelled run (``--label``); another label is shown as it is.
LABELS = {"before": "before (engines spawned)", "after": "after (engines from the warm launcher)"}


class ColdStartOptions(Base, frozen=True, kw_only=True):
    """``benchmarks.cold_start``'s options (its command-line defaults).

    Attributes:
        rounds: Rounds; each measures both sides, the order swapping each round.
        model: The model vLLM starts cold and Turnout switches to (a demo model); Turnout starts on the other one.
        label: Names the run (``before``, ``after``): also written as ``cold_start_<label>.json``.
    """

    rounds: int = 3
    model: str = "plain"
    label: str | None = None


class ColdStartConfig(ColdStartOptions, frozen=True, kw_only=True):
    """The options and the command lines that were started.

    Attributes:
        turnout_command: Absent from files written before Turnout's side was measured.
        start_model: The model Turnout starts on (its default), from which it switches to ``model``.
    """

    command: str
    turnout_command: str | None = None
    start_model: str | None = None


class ColdStartRound(Base, frozen=True, kw_only=True):
    """One cold start of vLLM's own server (or the medians of them), in seconds."""

    ready_s: float
    first_token_s: float
    total_s: float
    shutdown_s: float


class TurnoutColdFigures(Base, frozen=True, kw_only=True):
    """Turnout's side of one round (or the medians of them), in seconds.

    Attributes:
        ready_s: Process start to ``/ready`` 200 (its default model's engine serving).
        first_token_s: Then the first token of a streamed chat on that model.
        switch_s: The ``stop`` switch's ``POST /v1/models/switch`` until its 200.
        switch_first_token_s: The switch request until the first token of a streamed chat on the target.
        shutdown_s: SIGINT until the server's process ended.
    """

    ready_s: float
    first_token_s: float
    switch_s: float
    switch_first_token_s: float
    shutdown_s: float


class TurnoutColdRound(TurnoutColdFigures, frozen=True, kw_only=True):
    """One round of Turnout's side.

    Attributes:
        first: The side that ran first in this round (``vllm`` or ``turnout``).
        switch_report: The switch's response body, whole.
        start_report: ``/admin/status``'s ``last_switch`` after ``/ready`` (the start-up activation), if any.
    """

    first: str
    switch_report: dict[str, Any]
    start_report: dict[str, Any] | None = None


class GoalRatio(Base, frozen=True, kw_only=True):
    """A ratio of the medians against its goal (at most ``goal``), and the same ratio round by round."""

    name: str
    ratio: float | None
    goal: float
    met: bool
    per_round: list[float | None]


class ColdStart(Result, frozen=True, kw_only=True):
    """``cold_start*.json``: vLLM's rounds (``rounds``, ``medians``) and, paired by index, Turnout's.

    Attributes:
        turnout: Turnout's rounds; empty in files written before it was measured.
        turnout_medians: Their medians.
        goals: The goal ratios (``GOALS``).
    """

    config: ColdStartConfig
    rounds: list[ColdStartRound]
    medians: ColdStartRound
    turnout: list[TurnoutColdRound] = msgspec.field(default_factory=list)
    turnout_medians: TurnoutColdFigures | None = None
    goals: list[GoalRatio] = msgspec.field(default_factory=list)


def result_name(label: str | None) -> str:
    """The result file's name (less ``.json``) for a run labelled ``label``."""
    return f"cold_start_{label}" if label else "cold_start"


def vllm_medians(rows: Sequence[ColdStartRound]) -> ColdStartRound:
    """vLLM's medians, field by field."""
    return ColdStartRound(
        **{name: median([getattr(row, name) for row in rows]) for name in ColdStartRound.__struct_fields__}
    )


def turnout_medians(rows: Sequence[TurnoutColdFigures]) -> TurnoutColdFigures:
    """Turnout's medians, field by field."""
    fields = TurnoutColdFigures.__struct_fields__
    return TurnoutColdFigures(**{name: median([getattr(row, name) for row in rows]) for name in fields})


def _ratio(numerator: float, denominator: float) -> float | None:
    value = numerator / denominator if denominator else math.nan
    return round(value, 4) if math.isfinite(value) else None


def judge(
    vllm: Sequence[ColdStartRound], turnout: Sequence[TurnoutColdFigures]
) -> tuple[ColdStartRound, TurnoutColdFigures, list[GoalRatio]]:
    """Both sides' medians and the goal ratios: of the medians, and round by round (the rounds are paired)."""
    v, t = vllm_medians(vllm), turnout_medians(turnout)
    pairs = list(zip(vllm, turnout, strict=True))
    goals = []
    for name, ratio, per_round in (
        (
            SWITCH_GOAL,
            _ratio(t.switch_first_token_s, v.total_s),
            [_ratio(b.switch_first_token_s, a.total_s) for a, b in pairs],
        ),
        (START_GOAL, _ratio(t.ready_s, v.ready_s), [_ratio(b.ready_s, a.ready_s) for a, b in pairs]),
    ):
        limit = GOALS[name]
        goals.append(
            GoalRatio(name=name, ratio=ratio, goal=limit, met=ratio is not None and ratio <= limit, per_round=per_round)
        )
    return v, t, goals


def _flatten(prefix: str, value: Any) -> dict[str, float]:
    """Numeric leaves of ``value`` under dotted names; a list item is named by its ``name``/``phase`` key if any."""
    if isinstance(value, bool) or value is None:
        return {}
    if isinstance(value, int | float):
        return {prefix: float(value)}
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            out |= _flatten(f"{prefix}.{key}", item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            named = item.get("name") or item.get("phase") if isinstance(item, dict) else None
            if isinstance(named, str) and isinstance(item, dict):
                rest = {k: v for k, v in item.items() if k not in ("name", "phase")}
                leaves = _flatten(f"{prefix}.{named}", rest)
                # A {"name": ..., "ms": ...} item reads as the phase's own figure.
                out |= {key.removesuffix(".ms") if len(leaves) == 1 else key: v for key, v in leaves.items()}
            else:
                out |= _flatten(f"{prefix}.{index}", item)
    return out


def report_phases(report: dict[str, Any] | None) -> dict[str, float]:
    """A switch report's timings: every numeric leaf named ``*_ms``, and every one under a field named ``*phase*``.

    Read by name, not by type, so that it works on reports with and without a phases field, flat or nested.
    """
    leaves = _flatten("", report or {})
    return {
        key.removeprefix("."): value
        for key, value in leaves.items()
        if "phase" in key or key.rsplit(".", 1)[-1].endswith("_ms")
    }


def phase_medians(rows: Sequence[TurnoutColdRound], *, start: bool = False) -> dict[str, float]:
    """Per timing of the switch reports (``start``: the start-up reports), its median over the rounds, in ms."""
    samples: dict[str, list[float]] = {}
    for row in rows:
        for key, value in report_phases(row.start_report if start else row.switch_report).items():
            samples.setdefault(key, []).append(value)
    return {key: round(median(values), 1) for key, values in samples.items()}


def _s(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}x"


def table_lines(data: ColdStart) -> list[str]:
    """The benchmark's printed report: every round, the medians, the two ratios against their goals, the phases."""
    header = (
        f"{'round':<8}{'first':<9}{'vLLM ready':>11}{'vLLM 1st tok':>13}{'Turnout ready':>14}{'1st tok':>9}"
        f"{'switch 200':>11}{'switch 1st tok':>15}{'switch/vLLM':>12}{'start/vLLM':>11}"
    )
    lines = [
        "seconds; 'vLLM 1st tok' is vLLM's start to its first token, 'switch 1st tok' the switch request to the "
        "target's first token",
        header,
    ]
    goals = {goal.name: goal for goal in data.goals}
    switch_goal, start_goal = goals.get(SWITCH_GOAL), goals.get(START_GOAL)
    for index, (one, other) in enumerate(zip(data.rounds, data.turnout, strict=False)):
        lines.append(
            f"{index + 1:<8}{other.first:<9}{_s(one.ready_s):>11}{_s(one.total_s):>13}{_s(other.ready_s):>14}"
            f"{_s(other.first_token_s, 3):>9}{_s(other.switch_s):>11}{_s(other.switch_first_token_s):>15}"
            f"{_x(switch_goal.per_round[index] if switch_goal else None):>12}"
            f"{_x(start_goal.per_round[index] if start_goal else None):>11}"
        )
    v, t = data.medians, data.turnout_medians
    if t is not None and switch_goal is not None and start_goal is not None:
        lines.append(
            f"{'median':<8}{'':<9}{_s(v.ready_s):>11}{_s(v.total_s):>13}{_s(t.ready_s):>14}"
            f"{_s(t.first_token_s, 3):>9}{_s(t.switch_s):>11}{_s(t.switch_first_token_s):>15}"
            f"{_x(switch_goal.ratio):>12}{_x(start_goal.ratio):>11}"
        )
    lines.append("")
    for goal in data.goals:
        verdict = "met" if goal.met else "NOT met"
        lines.append(f"{goal.name}: {_x(goal.ratio)} (goal <= {goal.goal}x: {verdict})")
    for title, phases in (
        ("switch report (median ms)", phase_medians(data.turnout)),
        ("start-up report (median ms)", phase_medians(data.turnout, start=True)),
    ):
        if phases:
            lines.append(f"{title}: " + ", ".join(f"{key} {value:g}" for key, value in phases.items()))
    return lines


def _label(data: ColdStart) -> str:
    label = data.config.label
    return LABELS.get(label, label) if label else "unlabelled"


def _summary_row(data: ColdStart) -> list[str]:
    v, t = data.medians, data.turnout_medians
    goals = {goal.name: goal for goal in data.goals}
    cells = [_label(data), f"{data.machine.date}, `{data.machine.turnout_commit}`", str(data.config.rounds)]
    cells += [_s(v.ready_s), _s(v.total_s)]
    if t is None:
        return [*cells, "n/a", "n/a", "n/a", "n/a", "n/a"]
    cells += [_s(t.ready_s), _s(t.switch_s), _s(t.switch_first_token_s)]
    for name in GOALS:
        goal = goals.get(name)
        cells.append("n/a" if goal is None else f"{_x(goal.ratio)} ({'met' if goal.met else 'MISSED'})")
    return cells


def page_section(before: ColdStart | None, after: ColdStart | None) -> list[str]:
    """The docs page's section (``benchmarks/docs_page.py``): before and after, side by side, then the phases."""
    lines = [
        "## Cold start: a `stop` switch and Turnout's start against vLLM's own server",
        "",
        "`benchmarks/cold_start.py`, both sides in one run on the same model and engine flags, the order swapping "
        "each round: vLLM's own server from a cold process to `/health` 200 and to the first token of a streamed "
        "chat; `turnout serve` on the demo's two models with strategy `stop`, from a cold process to `/ready`, "
        "then `POST /v1/models/switch` to the model vLLM started (it holds no engine), timed from the request to "
        "the first token of a streamed chat on it. Goals (issue 40): the switch to its first token at most "
        f"{GOALS[SWITCH_GOAL]}x vLLM's cold start to its first token; Turnout's start no slower than vLLM's "
        f"({GOALS[START_GOAL]}x). Medians in seconds.",
        "",
    ]
    runs = [data for data in (before, after) if data is not None]
    if not runs:
        return [*lines, "**Not measured** yet (`python -m benchmarks.cold_start --label before`).", ""]
    header = [
        "run",
        "measured",
        "rounds",
        "vLLM start -> /health",
        "vLLM start -> first token",
        "Turnout start -> /ready",
        "stop switch POST -> 200",
        "stop switch -> first token",
        f"switch / vLLM cold (goal <= {GOALS[SWITCH_GOAL]}x)",
        f"Turnout start / vLLM start (goal <= {GOALS[START_GOAL]}x)",
    ]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_summary_row(data)) + " |" for data in runs]
    lines.append("")
    if after is None:
        lines += [
            'The "after" row comes from the warm launcher\'s run (`python -m benchmarks.cold_start --rounds 2 '
            "--label after`); the lead fills it in.",
            "",
        ]
    switch = {_label(data): phase_medians(data.turnout) for data in runs}
    start = {_label(data): phase_medians(data.turnout, start=True) for data in runs}
    keys = [*dict.fromkeys(f"switch: {k}" for p in switch.values() for k in p)]
    keys += [*dict.fromkeys(f"start-up: {k}" for p in start.values() for k in p)]
    if keys:
        lines += [
            "Phases, from the server's reports (median ms): the switch's response, and the start-up activation "
            "(`/admin/status`'s `last_switch` right after `/ready`).",
            "",
            "| phase | " + " | ".join(switch) + " |",
            "|---|" + "---|" * len(switch),
        ]
        for key in keys:
            kind, name = key.split(": ", 1)
            source = switch if kind == "switch" else start
            lines.append(f"| {key} | " + " | ".join(_s(source[label].get(name), 1) for label in switch) + " |")
        lines.append("")
    for data in runs:
        lines += [f"<details><summary>{_label(data)}: every round</summary>", "", "```", *table_lines(data), "```"]
        lines += ["", "</details>", ""]
    return lines
