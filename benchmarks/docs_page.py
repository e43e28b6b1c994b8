"""Writes docs/benchmarks.md from the JSON results: machine, date, commands, figures, each goal met or missed.

    .venv/bin/python -m benchmarks.docs_page      # `just bench` runs it last

Every figure on the page comes from a file in ``benchmarks/results/``; a benchmark that has not run (or failed)
is said to be missing rather than left out silently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.cluster_sim import page_section as _cluster
from benchmarks.cold_start_results import ColdStart
from benchmarks.cold_start_results import page_section as _cold
from benchmarks.ratios import paired_ratios, within_noise
from benchmarks.request_profile_results import RequestProfile
from benchmarks.request_profile_results import page_section as _request_profile
from benchmarks.residency_live import ResidencyLive
from benchmarks.residency_live import page_section as _residency_live
from benchmarks.residency_policies import ResidencyPolicies
from benchmarks.residency_policies import page_section as _residency
from benchmarks.result_types import (
    AutoMode,
    Captured,
    ClusterSimulation,
    EngineLimit,
    Paired,
    ReliabilityLong,
    Result,
    RunAll,
    SteadyState,
    SwitchLatency,
)
from benchmarks.results import Machine, read_result
from benchmarks.servers import repo_relative
from benchmarks.switch_proof import SwitchProof
from benchmarks.switch_proof import page_section as _proof
from benchmarks.switch_weights import SwitchWeights
from benchmarks.switch_weights import page_section as _weights
from server.tinymodels.spec import REPO_ROOT

__all__ = ["DOCS_PATH", "render", "write_docs"]

DOCS_PATH = REPO_ROOT / "docs" / "benchmarks.md"
#: The results whose machine facts head the page when neither ``steady_state`` nor ``run_all`` exists, in order.
_OTHERS: tuple[tuple[str, type[Result]], ...] = (
    ("engine_limit", EngineLimit),
    ("cold_start", ColdStart),
    ("switch_latency", SwitchLatency),
    ("switch_weights", SwitchWeights),
    ("switch_proof", SwitchProof),
    ("auto_mode", AutoMode),
    ("cluster_simulation", ClusterSimulation),
    ("residency_policies", ResidencyPolicies),
    ("residency_live", ResidencyLive),
    ("reliability_long", ReliabilityLong),
)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def _ratio(value: float | None, digits: int = 2) -> str:
    """A ratio as ``1.23x``; n/a where it could not be computed (JSON keeps no NaN)."""
    return f"{value:.{digits}f}x" if value is not None else "n/a"


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _goals(goals: dict[str, bool], paired: Paired | None = None) -> list[str]:
    lines = []
    for goal, met in goals.items():
        noise = "; within the noise: the goal lies inside the 95% interval of the paired rounds"
        shown = noise if paired and within_noise(goal, paired) else ""
        lines.append(f"- **{'Met' if met else 'MISSED'}**: {goal}{shown}")
    return [*lines, ""]


def _paired(paired: Paired) -> list[str]:
    speed, cpu = paired.req_per_s, paired.cpu_ms_per_request
    if speed is None or cpu is None:
        return []
    return [
        f"Pooled over the {paired.pairs} (workload, round) pairs, where both servers ran back to back: "
        f"req/s {speed.ratio:.3f}x (95% interval {speed.low:.3f} to {_fmt(speed.high, 3)}), CPU per request "
        f"{cpu.ratio:.3f}x ({cpu.low:.3f} to {_fmt(cpu.high, 3)}). A goal inside an interval cannot be told apart "
        "from the measured figure on this machine, whichever side of it the median falls.",
        "",
    ]


def _machine(m: Machine | None) -> list[str]:
    if m is None:
        return ["No results yet: run `just bench`.", ""]
    return [
        f"- Date: {m.date}; Turnout commit `{m.turnout_commit}`",
        f"- CPU: {m.cpu}, {m.cores} cores, {m.memory_gib} GiB RAM; load average at the end "
        f"{m.load_average} (the machine is shared, so expect noise)",
        f"- Python {m.python}, vLLM {m.vllm}, Litestar {m.litestar}, uvicorn {m.uvicorn}, "
        f"uvloop {m.uvloop}, httptools {m.httptools}",
        "",
    ]


def _steady(data: SteadyState | None, before: SteadyState | None) -> list[str]:
    lines = ["## Steady state: Turnout against vLLM's own server", ""]
    if data is None:
        return [*lines, "**Not measured** in this run (no `steady_state.json`).", ""]
    config, summary = data.config, data.summary
    paired = summary.paired or paired_ratios(data.rounds)
    c1_prompts = config.prompts if config.c1_prompts is None else config.c1_prompts
    lines += [
        f"Mode `{data.mode}`: {config.rounds} alternating rounds per server, {config.prompts} requests per "
        f"client run ({c1_prompts} at concurrency 1), the `{config.model}` tiny "
        f"model with engine args `{config.engine_args}`. "
        f"Took {data.seconds:.0f} s.",
        "",
        "```",
        *data.commands.values(),
        "```",
        "",
        f"**Turnout/vLLM, geometric mean over the {len(summary.per_workload)} workloads: "
        f"{_ratio(summary.req_per_s_ratio, 3)} the req/s, {_ratio(summary.cpu_ratio, 3)} the frontend CPU per "
        f"request.** Failed requests: {summary.failed}.",
        "",
        *_paired(paired),
        *_goals(summary.goals, paired),
        "How it is measured: both servers are up at once and every workload runs on one and then the other, the "
        "order swapping each round. Load comes from vLLM's own benchmark client (`vllm.benchmarks.serve`, random "
        "dataset, 32 tokens in, 8 out with `ignore_eos`, greedy); it always streams, so the `json` rows use a "
        "non-streaming request function registered beside vLLM's (TTFT there is the whole response). CPU-ms/req "
        "is utime+stime of the server process alone (`/proc/PID/stat`, not its engine-core child) across the "
        "client's `benchmark()` call, divided by the requests sent; the client's four `/metrics` scrapes per run "
        "(for speculative-decoding stats these models do not have) are skipped, since they cost per run, not per "
        "request, and the two servers' `/metrics` differ in size.",
        "",
        "Medians per workload (req/s and TTFT are bimodal on this machine; CPU-ms per request of the server process "
        "alone is the stable figure):",
        "",
    ]
    rows = []
    for entry in summary.per_workload:
        v, t = entry.vllm, entry.turnout
        rows.append(
            [
                entry.workload,
                _fmt(v.req_per_s),
                _fmt(t.req_per_s),
                _ratio(entry.req_per_s_ratio),
                f"{_fmt(v.ttft_p50_ms)} / {_fmt(v.ttft_p99_ms)}",
                f"{_fmt(t.ttft_p50_ms)} / {_fmt(t.ttft_p99_ms)}",
                _fmt(v.cpu_ms_per_request, 2),
                _fmt(t.cpu_ms_per_request, 2),
                _ratio(entry.cpu_ratio),
            ]
        )
    lines += _table(
        [
            "workload",
            "vLLM req/s",
            "Turnout req/s",
            "ratio",
            "vLLM TTFT p50/p99 ms",
            "Turnout TTFT p50/p99 ms",
            "vLLM CPU-ms/req",
            "Turnout CPU-ms/req",
            "ratio",
        ],
        rows,
    )
    if before is not None:
        lines += _before_after(before, data)
    lines += ["<details><summary>Every round</summary>", ""]
    lines += _table(
        ["round", "server", "workload", "req/s", "TTFT p50 ms", "TTFT p99 ms", "CPU-ms/req", "failed"],
        [
            [
                r.round,
                r.server,
                r.workload,
                _fmt(r.req_per_s),
                _fmt(r.ttft_p50_ms),
                _fmt(r.ttft_p99_ms),
                _fmt(r.cpu_ms_per_request, 2),
                r.failed,
            ]
            for r in data.rounds
        ],
    )
    return [*lines, "</details>", ""]


def _before_after(before: SteadyState, after: SteadyState) -> list[str]:
    b, a = before.summary, after.summary
    lines = [
        "### Before and after the frontend work",
        "",
        f'"Before" is main at `{before.machine.turnout_commit}` ({before.machine.date}, mode '
        f"`{before.mode}`, {before.config.rounds} rounds), measured the same way against the same vLLM "
        "server. Ratios are Turnout/vLLM, so each is measured side by side in its own run. On this shared machine "
        "the req/s ratios move between runs by more than any change here could explain (throughput is bimodal); "
        "the CPU-ms/request ratio is the figure to compare.",
        "",
    ]
    rows = [
        [
            "all (geometric mean)",
            _ratio(b.req_per_s_ratio),
            _ratio(a.req_per_s_ratio),
            _ratio(b.cpu_ratio),
            _ratio(a.cpu_ratio),
            "",
            "",
        ]
    ]
    after_by = {entry.workload: entry for entry in a.per_workload}
    for entry in b.per_workload:
        now = after_by.get(entry.workload)
        if now is None:
            continue
        rows.append(
            [
                entry.workload,
                _ratio(entry.req_per_s_ratio),
                _ratio(now.req_per_s_ratio),
                _ratio(entry.cpu_ratio),
                _ratio(now.cpu_ratio),
                _fmt(entry.turnout.cpu_ms_per_request, 2),
                _fmt(now.turnout.cpu_ms_per_request, 2),
            ]
        )
    return lines + _table(
        [
            "workload",
            "req/s ratio before",
            "after",
            "CPU/req ratio before",
            "after",
            "Turnout CPU-ms/req before",
            "after",
        ],
        rows,
    )


def _limit(data: EngineLimit | None) -> list[str]:
    lines = ["## The limit: AsyncLLM in-process, no HTTP", ""]
    if data is None:
        return [*lines, "**Not measured** in this run.", ""]
    lines += [
        f"Same model and engine args, {data.config.prompts} requests per run, all sent at once, each token asked "
        f"for as it comes (`DELTA`, as a streamed response asks), median of {data.config.rounds} rounds "
        "(`benchmarks/engine_floor.py`'s runs at full speed). CPU-ms/req is this process's (AsyncLLM's client "
        "side: output processing and detokenizing), the floor any server's frontend stands on at full speed; the "
        "request profile above measures it at a fixed rate, where it stands higher.",
        "",
    ]
    return lines + _table(
        ["concurrency", "req/s", "TTFT p50 ms", "TTFT p99 ms", "CPU-ms/req"],
        [
            [
                key,
                _fmt(m.req_per_s),
                _fmt(m.ttft_p50_ms),
                _fmt(m.ttft_p99_ms),
                _fmt(m.cpu_ms_per_request, 2),
            ]
            for key, m in data.medians.items()
        ],
    )


def _switch(switch: SwitchLatency | None, cold: ColdStart | None) -> list[str]:
    lines = ["## Switch latency against a cold start of vLLM's own server", ""]
    cold_total = None
    if cold is not None:
        m = cold.medians
        cold_total = m.total_s
        lines += [
            f"Cold start of vLLM's own server on `{cold.config.model}` (median of {cold.config.rounds}): "
            f"{m.ready_s:.1f} s to `/health` 200, then {m.first_token_s * 1000:.0f} ms to the first token: "
            f"**{m.total_s:.1f} s**, plus {m.shutdown_s:.1f} s to stop the old server first.",
            "",
            "```",
            cold.config.command,
            "```",
            "",
        ]
    else:
        lines += ["The cold start of vLLM's own server was **not measured** in this run.", ""]
    if switch is None:
        return [*lines, "Turnout's switch times were **not measured** in this run.", ""]
    if not switch.strategies:
        return [*lines, switch.note or "The switch benchmark reported no strategies.", ""]
    rows = []
    for name, figures in switch.strategies.items():
        post, first = figures.post_to_200_s, figures.first_token_s
        total = post + (first or 0.0) if post is not None else None
        speedup = f"{cold_total / total:.0f}x faster" if cold_total and total else "n/a"
        rows.append(
            [
                name,
                _fmt(post, 3),
                _fmt(first, 3),
                _fmt(total, 3),
                speedup,
                _fmt(figures.cold_switch_s, 1),
                _fmt(figures.engine_start_s, 1),
            ]
        )
    lines += [
        f"Turnout, through the real server (`benchmarks/switch_times.py`, {switch.config.rounds} round trips "
        "per strategy, warm medians):",
        "",
        *_table(
            [
                "strategy",
                "POST -> 200 s",
                "then first token s",
                "total s",
                "against vLLM's cold start",
                "cold first switch s",
                "server start s",
            ],
            rows,
        ),
    ]
    if switch.note:
        lines += [switch.note, ""]
    return lines


def _auto(data: AutoMode | None, simulation: Captured | None) -> list[str]:
    lines = ["## Auto mode: two models' requests interleaved, through the real server", ""]
    if data is None:
        lines += ["**Not measured** in this run.", ""]
    else:
        c = data.config
        lines += [
            f"{c.requests} chat requests per row (half streaming) for `tools` and `plain` alternately in blocks, "
            f"concurrency {c.concurrency}, strategy `{c.strategy}`. Switches are active-model changes seen on "
            "`/health`.",
            "",
            *_table(
                ["block", "req/s", "latency p50 ms", "p99 ms", "switches", "ok", "refused (retry)", "lost", "wrong"],
                [
                    [
                        r.block,
                        _fmt(r.req_per_s),
                        _fmt(r.latency_p50_ms, 0),
                        _fmt(r.latency_p99_ms, 0),
                        r.switches_seen,
                        r.ok,
                        r.refused,
                        r.lost,
                        r.wrong,
                    ]
                    for r in data.rows
                ],
            ),
            *_goals(data.goals),
        ]
    if simulation is not None:
        lines += ["### Scheduler simulation", "", "```", simulation.output.strip(), "```", ""]
    return lines


def _steps(data: RunAll | None) -> list[str]:
    if data is None:
        return []
    lines = ["## What ran", "", f"Last invocation: `{data.command}`, mode `{data.mode}`.", ""]
    lines += _table(
        ["step", "command", "mode", "finished", "result", "seconds"],
        [
            [
                s.name,
                f"`{s.command}`",
                s.mode,
                s.finished,
                s.status + "".join(f"; replaces {r.status} of {r.finished}" for r in s.replaces),
                _fmt(s.seconds, 0),
            ]
            for s in data.steps
        ],
    )
    return lines


def _reliability(data: ReliabilityLong | None) -> list[str]:
    lines = ["## Load-and-fault suite (long mode)", ""]
    if data is None:
        return [*lines, "**Not run** in this run.", ""]
    return [
        *lines,
        f"`{data.command}`: **{data.status}** ({data.seconds:.0f} s).",
        "",
        "```",
        data.summary.strip(),
        "```",
        "",
    ]


def render() -> str:
    """The page, from whatever results exist."""
    steady = read_result("steady_state", SteadyState)
    run = read_result("run_all", RunAll)
    first: Result | None = steady or run or next(filter(None, (read_result(n, t) for n, t in _OTHERS)), None)
    lines = [
        "# Benchmarks",
        "",
        "Written by `just bench` (`benchmarks/run_all.py`); do not edit by hand, rerun it. Each benchmark prints "
        "its table and writes `benchmarks/results/<name>.json`, which this page is built from.",
        "",
        "## Machine",
        "",
        *_machine(first.machine if first is not None else None),
        *_steps(run),
        *_steady(steady, read_result("steady_state_before", SteadyState)),
        *_request_profile(
            read_result("request_profile", RequestProfile), read_result("request_profile_before", RequestProfile)
        ),
        *_limit(read_result("engine_limit", EngineLimit)),
        *_switch(read_result("switch_latency", SwitchLatency), read_result("cold_start", ColdStart)),
        *_cold(read_result("cold_start_before", ColdStart), read_result("cold_start_after", ColdStart)),
        *_weights(read_result("switch_weights", SwitchWeights), read_result("switch_weights_before", SwitchWeights)),
        *_proof(read_result("switch_proof", SwitchProof)),
        *_auto(read_result("auto_mode", AutoMode), read_result("scheduler_simulation", Captured)),
        *_cluster(read_result("cluster_simulation", ClusterSimulation)),
        *_residency(read_result("residency_policies", ResidencyPolicies)),
        *_residency_live(read_result("residency_live", ResidencyLive)),
        *_reliability(read_result("reliability_long", ReliabilityLong)),
    ]
    # A result file written before its writer made paths relative may still name this machine's checkout.
    return repo_relative("\n".join(lines).rstrip() + "\n")


def write_docs(path: Path = DOCS_PATH) -> Path:
    """Write the page and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render())
    return path


if __name__ == "__main__":
    print(f"wrote {write_docs()}")
