"""The result files' types: one msgspec Struct per kind of ``benchmarks/results/<name>.json``.

A benchmark builds one of these, ``write_result`` encodes it, and ``docs_page`` decodes it back with
``read_result(name, Type)``, so the page works on typed values and a file that drifts from its type fails with
the path of the field. The options a benchmark takes on its command line are Structs too, and their defaults are
the argparse defaults: each default is stated once, here.

Figures that can be NaN or infinite (a median of no values, the upper end of an interval from one pair) are typed
``float | None``: JSON has no NaN, so msgspec writes ``null`` and reads it back as None.

The machine facts (``Machine``) and the encoding live in ``benchmarks/results.py``; the switch-at-realistic-size
result (``SwitchWeights``) lives beside its benchmark, ``benchmarks/switch_weights.py``, and the cold-start result
(``ColdStart``) beside its arithmetic, ``benchmarks/cold_start_results.py``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from benchmarks.results import Machine, machine

__all__ = [
    "AutoMode",
    "AutoModeConfig",
    "AutoModeOptions",
    "AutoRow",
    "Base",
    "Captured",
    "ClusterCell",
    "ClusterSimOptions",
    "ClusterSimulation",
    "EngineLimit",
    "EngineLimitOptions",
    "Interval",
    "LimitFigures",
    "LimitRound",
    "LoadResult",
    "Paired",
    "ReliabilityLong",
    "ReliabilityRun",
    "Replaced",
    "Result",
    "RunAll",
    "ServerMedians",
    "SteadyConfig",
    "SteadyRound",
    "SteadyState",
    "SteadySummary",
    "StepRecord",
    "StrategyFigures",
    "StrategySummary",
    "Switch",
    "SwitchLatency",
    "SwitchTimes",
    "SwitchTimesOptions",
    "WorkloadSummary",
]


class Base(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every result type: immutable, keyword-only, and strict (a field the type does not know is an error)."""


class Result(Base, frozen=True, kw_only=True):
    """One result file: the machine it was measured on, then the benchmark's own fields.

    Attributes:
        machine: Read when the result is built, unless given (a decoded file keeps its own).
    """

    machine: Machine = msgspec.field(default_factory=machine)


class Captured(Result, frozen=True, kw_only=True):
    """A step that writes no JSON of its own (``run_all``'s ``capture``): its command and what it printed."""

    command: str
    output: str


# --- run_all ---------------------------------------------------------------------------------------------------


class Replaced(Base, frozen=True, kw_only=True):
    """An earlier outcome of a step that a rerun replaced: kept so the page says a failure was rerun."""

    status: str
    finished: str


class StepRecord(Base, frozen=True, kw_only=True):
    """One step of ``run_all``: what ran, in which mode, when it finished and how it ended."""

    name: str
    command: str
    status: str
    seconds: float
    mode: str
    finished: str
    replaces: list[Replaced] = msgspec.field(default_factory=list)


class RunAll(Result, frozen=True, kw_only=True):
    """``run_all.json``: the last invocation and every step's latest record."""

    mode: str
    command: str
    steps: list[StepRecord]


# --- steady_state ----------------------------------------------------------------------------------------------


class LoadResult(Base, frozen=True, kw_only=True):
    """One client run against one server (``benchmarks/load.py``).

    Attributes:
        completed: Requests that succeeded.
        failed: Requests that failed (an error or no token).
        req_per_s: Completed requests per second of the run.
        ttft_p50_ms: Median time to first token (non-streaming: to the whole response); None: no request answered.
        ttft_p99_ms: 99th percentile of the same.
        cpu_ms_per_request: The server process's CPU milliseconds per request sent during the run.
        first_error: One failure's message, for the log.
    """

    completed: int
    failed: int
    req_per_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    cpu_ms_per_request: float
    first_error: str | None


class SteadyRound(LoadResult, frozen=True, kw_only=True):
    """One client run in the steady-state comparison: which round, server and workload it measured."""

    round: int
    server: str
    workload: str


class ServerMedians(Base, frozen=True, kw_only=True):
    """One server's medians over the rounds of one workload, and its failed requests summed."""

    req_per_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    cpu_ms_per_request: float | None
    failed: int


class WorkloadSummary(Base, frozen=True, kw_only=True):
    """Both servers' medians on one workload and Turnout/vLLM's ratios."""

    workload: str
    vllm: ServerMedians
    turnout: ServerMedians
    req_per_s_ratio: float | None
    cpu_ratio: float | None


class Interval(Base, frozen=True, kw_only=True):
    """A geometric mean of paired ratios and its 95% interval; ``high`` is None when unbounded (one pair)."""

    ratio: float
    low: float
    high: float | None


class Paired(Base, frozen=True, kw_only=True):
    """Turnout/vLLM pooled over the (workload, round) pairs; a metric is absent when no pair measured it."""

    pairs: int
    req_per_s: Interval | None = None
    cpu_ms_per_request: Interval | None = None


class SteadySummary(Base, frozen=True, kw_only=True):
    """The comparison's outcome: per workload, pooled, and the goals met or missed.

    Attributes:
        paired: Absent from files written before it was kept; the page then computes it from the rounds.
    """

    per_workload: list[WorkloadSummary]
    paired: Paired | None = None
    req_per_s_ratio: float | None
    cpu_ratio: float | None
    failed: int
    goals: dict[str, bool]


class SteadyConfig(Base, frozen=True, kw_only=True):
    """The run's shape (a mode of ``steady_state.MODES``, with any override) and the model it served.

    Attributes:
        c1_prompts: Requests per client run at concurrency 1; absent from the oldest files (then ``prompts``).
    """

    rounds: int
    prompts: int
    c1_prompts: int | None = None
    concurrency: tuple[int, ...]
    kinds: tuple[str, ...]
    model: str
    engine_args: dict[str, Any]


class SteadyState(Result, frozen=True, kw_only=True):
    """``steady_state*.json``: Turnout against vLLM's own server, every round and the summary."""

    mode: str
    config: SteadyConfig
    commands: dict[str, str]
    seconds: float
    rounds: list[SteadyRound]
    summary: SteadySummary


# --- engine_limit ----------------------------------------------------------------------------------------------


class EngineLimitOptions(Base, frozen=True, kw_only=True):
    """``benchmarks.engine_limit``'s options (its command-line defaults), kept in the result as its config."""

    prompts: int = 200
    concurrency: tuple[int, ...] = (1, 16, 64)
    rounds: int = 3


class LimitFigures(Base, frozen=True, kw_only=True):
    """AsyncLLM in-process at one concurrency: throughput, TTFT and this process's CPU per request."""

    req_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    cpu_ms_per_request: float


class LimitRound(LimitFigures, frozen=True, kw_only=True):
    """One measured run of the in-process limit."""

    round: int
    concurrency: int
    requests: int


class EngineLimit(Result, frozen=True, kw_only=True):
    """``engine_limit.json``: every run, and the medians per concurrency (keyed ``c<N>``)."""

    config: EngineLimitOptions
    rounds: list[LimitRound]
    medians: dict[str, LimitFigures]


# --- switch_times and switch_latency ---------------------------------------------------------------------------


class Switch(Base, frozen=True, kw_only=True):
    """One switch measured by ``benchmarks/switch_times.py``; ``report`` is the server's switch report as sent."""

    target: str
    switch_ms: float
    ttft_ms: float
    engine_rss_mb: float
    report: dict[str, Any]


class StrategySummary(Base, frozen=True, kw_only=True):
    """One strategy's warm medians in milliseconds (None: not measured), its start and its cold first switch."""

    engine_start_s: float
    cold_switch_ms: float | None
    switch_ms: float | None
    server_duration_ms: float | None
    ttft_ms: float | None
    engine_rss_mb: float | None
    methods: list[str]
    drain_ms: float | None
    unload_ms: float | None
    load_ms: float | None
    kv_cache_ms: float | None
    frontend_ms: float | None


class SwitchTimes(Base, frozen=True, kw_only=True):
    """What ``switch_times.main`` returns (and writes with ``--json-out``)."""

    summary: dict[str, StrategySummary]
    ratios: dict[str, float | None]
    goal_reconfigure_over_stop: float
    switches: dict[str, list[Switch]]


class SwitchTimesOptions(Base, frozen=True, kw_only=True):
    """The options of ``benchmarks.switch_times`` and ``benchmarks.switch_latency`` (their command-line defaults).

    Attributes:
        rounds: Round trips (tools -> plain -> tools) per strategy.
    """

    rounds: int = 3


class StrategyFigures(Base, frozen=True, kw_only=True):
    """The page's figures for one strategy, in seconds (None: not measured)."""

    post_to_200_s: float | None
    first_token_s: float | None
    cold_switch_s: float | None
    engine_start_s: float | None


class SwitchLatency(Result, frozen=True, kw_only=True):
    """``switch_latency.json``.

    Attributes:
        note: Said on the page instead of the table when ``switch_times`` gave no figures.
        output: Everything ``switch_times`` printed.
    """

    strategies: dict[str, StrategyFigures]
    config: SwitchTimesOptions
    switch_times: SwitchTimes | None = None
    note: str | None = None
    output: str


# --- auto_mode -------------------------------------------------------------------------------------------------


class AutoModeOptions(Base, frozen=True, kw_only=True):
    """``benchmarks.auto_mode``'s options (its command-line defaults)."""

    requests: int = 120
    concurrency: int = 8
    blocks: tuple[int, ...] = (1, 10, 40)


class AutoModeConfig(AutoModeOptions, frozen=True, kw_only=True):
    """The options and the strategy the auto-mode profile runs."""

    strategy: str


class AutoRow(Base, frozen=True, kw_only=True):
    """One block size's traffic: throughput, latency of the answered requests (None: none) and outcomes."""

    block: int
    requests: int
    concurrency: int
    req_per_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    switches_seen: int
    ok: int
    refused: int
    lost: int
    wrong: int


class AutoMode(Result, frozen=True, kw_only=True):
    """``auto_mode.json``."""

    config: AutoModeConfig
    rows: list[AutoRow]
    goals: dict[str, bool]


# --- cluster_sim -----------------------------------------------------------------------------------------------


class ClusterSimOptions(Base, frozen=True, kw_only=True):
    """``benchmarks.cluster_sim``'s options (its command-line defaults).

    Attributes:
        replicas, models: The grid: every replica count against every model count.
        requests: Requests per cell and policy (the same Poisson stream for every policy of a cell).
        utilization: Offered load per replica: arrival rate x service time / (replicas x batch).
        service_s: Mean seconds one request runs (exponential).
        batch: Requests one replica runs at once (vLLM's batch).
        capacities: Models one replica holds at once (Ray's ``max_num_models_per_replica``; its LRU), each a grid
            layer: 1 for ``stop``/``reconfigure``, Ray's default 3 for ``keep``.
        load_s: Seconds to load a model the replica does not hold, each a grid layer: an engine start (``stop``,
            17 s on the CPU machine) and an in-place swap (``reconfigure``, 0.9 s), auto_scheduler's ``COSTS``.
        activate_s: Seconds to make a held model the active one (``keep``).
        zipf: Model popularity: model ``i`` is asked with weight ``1 / (i + 1) ** zipf`` (0: uniform).
        max_ongoing: Ray's ``max_ongoing_requests``: past it a replica holding the model is passed over (spill).
        max_residency_s: Longest a replica keeps serving its active model while another model's request waits.
    """

    replicas: tuple[int, ...] = (2, 4, 8, 16)
    models: tuple[int, ...] = (2, 4, 8, 16, 32)
    requests: int = 2000
    utilization: float = 0.5
    service_s: float = 2.0
    batch: int = 8
    capacities: tuple[int, ...] = (1, 3)
    load_s: tuple[float, ...] = (17.0, 0.9)
    activate_s: float = 0.003
    zipf: float = 1.0
    max_ongoing: int = 16
    max_residency_s: float = 60.0
    seed: int = 7


class ClusterCell(Base, frozen=True, kw_only=True):
    """One policy on one cell of the grid.

    Attributes:
        switches_per_1000: Active-model changes on any replica per 1,000 requests (first loads included).
        loads_per_1000: Those that loaded a model the replica did not hold.
        busy_share: Replica time with a request running, over replicas x the time to the last answer.
        switching_share: Replica time spent switching, over the same.
    """

    replicas: int
    models: int
    capacity: int
    load_s: float
    policy: str
    requests: int
    switches_per_1000: float
    loads_per_1000: float
    latency_p50_s: float
    latency_p99_s: float
    busy_share: float
    switching_share: float


class ClusterSimulation(Result, frozen=True, kw_only=True):
    """``cluster_simulation.json``: the grid, and where one replica per model beats affinity swapping."""

    options: ClusterSimOptions
    cells: list[ClusterCell]
    dedicated_wins: list[str]
    conclusion: str


# --- reliability_long ------------------------------------------------------------------------------------------


class ReliabilityRun(msgspec.Struct, frozen=True, kw_only=True):
    """One traffic run's summary, as ``tests/reliability`` writes it.

    Lenient on purpose (unknown fields are kept out, not refused): the suite owns this shape, and a field it adds
    must not lose a long run's result.
    """

    requests: int
    seconds: float
    counts: dict[str, int]
    reasons: dict[str, dict[str, int]]
    switches: list[str]
    switch: dict[str, Any] | None = None


class ReliabilityLong(Result, frozen=True, kw_only=True):
    """``reliability_long.json``: the suite's verdict, its summary lines and each run's figures."""

    command: str
    status: str
    seconds: float
    summary: str
    runs: dict[str, ReliabilityRun]
