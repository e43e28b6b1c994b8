"""The request profile's result, its arithmetic and its docs section (no vLLM import: ``docs_page`` reads it).

``benchmarks/request_profile.py`` measures; this module holds what it writes (``RequestProfile``), how a py-spy
sample's stacks are split into the stages of a request (:func:`stage_shares`), and the page section.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from benchmarks.ratios import paired_ratios
from benchmarks.result_types import Base, Interval, Result, SteadyRound, SteadySummary

__all__ = [
    "FLOOR",
    "GOAL",
    "LOOP",
    "OTHER",
    "STAGES",
    "RequestProfile",
    "RequestProfileOptions",
    "StageSample",
    "floor_ratios",
    "page_section",
    "paired_cpu",
    "stage_of",
    "stage_shares",
]

#: The issue's goal for Turnout/vLLM CPU per request at a fixed load (the aim is 0.5x; the in-process floor 0.29x).
GOAL: Final = 0.7
#: The rows' name for the floor (``benchmarks/engine_floor.py``): vLLM's engine client alone, at the same load.
FLOOR: Final = "floor"

#: A request's stages, each with the frames that belong to it (a substring of ``function (file:line)``). A sample
#: whose innermost frame is the event loop or a thread pool's own goes to :data:`LOOP` (native work under the
#: loop: socket reads and writes, C callbacks); any other to the stage of its innermost frame that matches one (in
#: this order within a frame); none: ``other`` (logging, metrics, the serving classes' own code).
STAGES: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "parse and validate",
        ("model_validate", "validate_python", "read_json_object", "parse_request", "json/decoder.py", "_decode"),
    ),
    (
        "encode and SSE",
        (
            "model_dump_json",
            "model_dump ",
            "json/encoder.py",
            "api/streaming/delivery.py",
            "response/streaming.py",
            "starlette/responses.py",
            "sse",
        ),
    ),
    (
        "render and tokenize",
        ("renderers/", "chat_utils", "jinja2/", "transformers/", "tokenizers/", "tokenizer", "preprocess", "render"),
    ),
    (
        "output processing and detokenize",
        ("output_processor", "detokeniz", "logprobs", "async_llm.py", "serial_utils", "zmq/", "core_client.py"),
    ),
    (
        "admission and lease",
        (
            "server/engine/",
            "request_admission",
            "api/streaming/waiting.py",
            "key_scopes",
            "cache_salts",
            "request_bounds",
            "inflight_registry",
            "recording_client",
            "releasing_stream",
        ),
    ),
    ("HTTP and Litestar", ("uvicorn/", "h11/", "httptools", "litestar/", "starlette/", "fastapi/", "anyio/")),
)
OTHER: Final = "other"
LOOP: Final = "event loop and threads (native)"
_LOOP_FRAMES: Final = ("asyncio/", "uvloop", "concurrent/futures/thread.py", "threading.py", "selectors.py")


class RequestProfileOptions(Base, frozen=True, kw_only=True):
    """``benchmarks.request_profile``'s options (its command-line defaults), kept in the result.

    Attributes:
        rounds: Paired rounds: each workload on both servers, the order swapping every round.
        rate: Requests per second each client run sends (vLLM's client, ``--request-rate``).
        prompts: Requests per client run.
        concurrency: The most requests in flight (the client's ``--max-concurrency``): a cap, not the load.
        sample_s: Seconds of py-spy sampling per server for the per-stage split (0: none).
    """

    rounds: int = 5
    rate: float = 25.0
    prompts: int = 200
    concurrency: int = 64
    sample_s: int = 20


class StageSample(Base, frozen=True, kw_only=True):
    """One server's py-spy sample under the sampled workload: each stage's share of the samples, in percent."""

    server: str
    workload: str
    samples: int
    shares: dict[str, float]


class RequestProfile(Result, frozen=True, kw_only=True):
    """``request_profile.json``: CPU per request at a fixed load, per workload and per stage."""

    options: RequestProfileOptions
    commands: dict[str, str]
    seconds: float
    rounds: list[SteadyRound]
    summary: SteadySummary
    paired_cpu: dict[str, Interval | None]
    stages: list[StageSample]
    floor: list[SteadyRound] = msgspec.field(default_factory=list)


def stage_of(frames: Sequence[str]) -> str:
    """The stage of one sampled stack (``frames`` root first, as py-spy writes them)."""
    if frames and any(mark in frames[-1] for mark in _LOOP_FRAMES):
        return LOOP
    for frame in reversed(frames):
        for stage, marks in STAGES:
            if any(mark in frame for mark in marks):
                return stage
    return OTHER


def stage_shares(collapsed: Iterable[str]) -> tuple[int, dict[str, float]]:
    """The samples of a py-spy ``raw`` (collapsed) file's lines, and each stage's percentage of them."""
    counts: collections.Counter[str] = collections.Counter()
    for line in collapsed:
        stack, _, samples = line.rpartition(" ")
        if stack and samples.isdigit():
            counts[stage_of(stack.split(";"))] += int(samples)
    total = sum(counts.values())
    names = [stage for stage, _ in STAGES] + [LOOP, OTHER]
    return total, {name: 100 * counts[name] / total if total else 0.0 for name in names}


def paired_cpu(rows: list[SteadyRound], labels: Iterable[str]) -> dict[str, Interval | None]:
    """Turnout/vLLM CPU per request over each workload's paired rounds (the pooled interval is the summary's)."""
    return {label: paired_ratios([row for row in rows if row.workload == label]).cpu_ms_per_request for label in labels}


def floor_ratios(result: RequestProfile) -> tuple[dict[str, Interval | None], Interval | None]:
    """The floor/vLLM CPU per request per workload and pooled, over the rounds where both ran a workload."""
    rows = [row for row in result.rounds if row.server == "vllm"] + result.floor
    labels = dict.fromkeys(row.workload for row in result.floor)
    per_workload = {
        label: paired_ratios([row for row in rows if row.workload == label], FLOOR).cpu_ms_per_request
        for label in labels
    }
    return per_workload, paired_ratios(rows, FLOOR).cpu_ms_per_request


def _interval(interval: Interval | None) -> str:
    if interval is None:
        return "n/a"
    high = f"{interval.high:.2f}" if interval.high is not None else "inf"
    return f"{interval.ratio:.2f}x [{interval.low:.2f}, {high}]"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _pooled(result: RequestProfile) -> Interval | None:
    return result.summary.paired.cpu_ms_per_request if result.summary.paired is not None else None


def _floor_lines(result: RequestProfile) -> list[str]:
    if not result.floor:
        return ["No floor in this run (a run before `benchmarks/engine_floor.py`).", ""]
    per_workload, pooled = floor_ratios(result)
    lines = [
        "The floor at the same load, in the same rounds: vLLM's `AsyncLLM` alone in a process (`benchmarks/"
        "engine_floor.py`), the same model and engine arguments, prompts as token ids, no HTTP, no frontend; "
        "streamed workloads ask for every token (`DELTA`), JSON ones the final output (`FINAL_ONLY`). Any server "
        "that runs vLLM's engine client in its process pays this much per request. What the goal leaves for "
        "everything else a server does (HTTP, parsing, rendering and tokenizing, encoding) is the goal less the "
        "floor; what vLLM's and Turnout's servers spend on it is theirs less the floor. Medians in CPU-ms per request:",
        "",
        f"| workload | floor | floor/vLLM | the goal ({GOAL}x vLLM's) | goal less floor | vLLM less floor | "
        "Turnout less floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in result.summary.per_workload:
        values = sorted(row.cpu_ms_per_request for row in result.floor if row.workload == w.workload)
        vllm, turnout = w.vllm.cpu_ms_per_request, w.turnout.cpu_ms_per_request
        if not values or vllm is None or turnout is None:
            continue
        floor = values[len(values) // 2]
        lines.append(
            f"| {w.workload} | {floor:.2f} | {_interval(per_workload.get(w.workload))} | {GOAL * vllm:.2f} | "
            f"{GOAL * vllm - floor:.2f} | {vllm - floor:.2f} | {turnout - floor:.2f} |"
        )
    if pooled is None:
        verdict = "no pair to compare"
    elif pooled.low > GOAL:
        verdict = (
            f"the floor alone lies above {GOAL}x vLLM's server, its whole interval: no server that runs vLLM's "
            "engine client in its process meets the goal at this load, whatever its HTTP and frontend cost"
        )
    elif pooled.high is None or pooled.high >= GOAL:
        verdict = (
            f"{GOAL}x lies inside the floor's interval: the goal would leave a server's HTTP and frontend "
            "nothing that can be told apart from zero at this load"
        )
    else:
        verdict = f"the floor lies below {GOAL}x: the goal leaves a server's own work the room shown above"
    return [*lines, "", f"All workloads pooled, floor/vLLM: {_interval(pooled)}: {verdict}.", ""]


def page_section(result: RequestProfile | None, before: RequestProfile | None = None) -> list[str]:
    """The docs page's section (``benchmarks/docs_page.py``); ``before``: a run before a change, for comparison."""
    lines = ["## Where a request's CPU goes: Turnout against vLLM's server at a fixed load", ""]
    if result is None:
        return [*lines, "**Not measured** in this run (`python -m benchmarks.request_profile`).", ""]
    o = result.options
    lines += [
        f"`benchmarks/request_profile.py`: vLLM's benchmark client at `--request-rate {o.rate:g}` (at most "
        f"{o.concurrency} in flight), {o.prompts} random prompts of 32 tokens per run, 8 tokens out, {o.rounds} "
        "paired rounds alternating which server goes first. CPU-ms per request counts every process of the server "
        "but its engine core and the engine's workers (so moving work into a child process saves nothing). "
        "Ratios are Turnout/vLLM, the geometric mean of the paired rounds with its 95% interval.",
        "",
        f"- `{result.commands.get('vllm', '')}`",
        f"- `{result.commands.get('turnout', '')}`",
        "",
        "| workload | vLLM CPU-ms/req | Turnout CPU-ms/req | Turnout/vLLM | req/s vLLM / Turnout | "
        "TTFT p99 ms vLLM / Turnout |",
        "|---|---|---|---|---|---|",
    ]
    for w in result.summary.per_workload:
        v, t = w.vllm, w.turnout
        lines.append(
            f"| {w.workload} | {_ms(v.cpu_ms_per_request)} | {_ms(t.cpu_ms_per_request)} | "
            f"{_interval(result.paired_cpu.get(w.workload))} | {_ms(v.req_per_s)} / {_ms(t.req_per_s)} | "
            f"{_ms(v.ttft_p99_ms)} / {_ms(t.ttft_p99_ms)} |"
        )
    overall = _pooled(result)
    met = overall is not None and overall.ratio <= GOAL
    lines += [
        "",
        f"All workloads pooled: {_interval(overall)}. "
        f"**{'Met' if met else 'MISSED'}**: CPU per request <= {GOAL}x vLLM's.",
        "",
    ]
    lines += _floor_lines(result)
    if before is not None:
        lines += [
            f"Before (`request_profile_before.json`, Turnout {before.machine.turnout_commit}, {before.options.rounds} "
            f"round(s)): all workloads pooled {_interval(_pooled(before))}.",
            "",
        ]
    if result.stages:
        by_server = {sample.server: sample for sample in result.stages}
        names = [stage for stage, _ in STAGES] + [LOOP, OTHER]
        lines += [
            f"Per stage (py-spy, {o.sample_s} s per server under `{result.stages[0].workload}`; a sample goes to "
            "its innermost frame's stage, `benchmarks/request_profile_results.py`'s `STAGES`), percent of samples. "
            "py-spy samples by the wall clock, so a thread that waits for a core can be counted where it stands: on a "
            "machine whose engine keeps its cores busy a share of samples is not a share of CPU time, and the two "
            "servers' sample counts are not their CPU either (the CPU-ms above are):",
            "",
            "| stage | " + " | ".join(f"{server} ({by_server[server].samples} samples)" for server in by_server) + " |",
            "|---|" + "---|" * len(by_server),
        ]
        for name in names:
            lines.append(f"| {name} | " + " | ".join(f"{by_server[s].shares[name]:.1f}%" for s in by_server) + " |")
        lines.append("")
    else:
        lines += ["No per-stage sample in this run (py-spy missing, or `--sample-s 0`).", ""]
    return lines
