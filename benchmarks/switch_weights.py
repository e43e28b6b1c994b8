"""Switch times at realistic weight sizes, side by side with the floors for moving the weights.

    .venv/bin/python -m benchmarks.switch_weights [--rounds 2] [--strategies stop,reconfigure,keep]

Builds once (cached in ``.cache/weight-models``, or ``$TURNOUT_WEIGHT_MODELS``) two random float32 Llamas of
about 1 GiB with one architecture and different weights (``base-a``, ``base-b``) and one of another architecture
(``other``), see ``benchmarks/weight_models.py``. Then, through ``turnout serve`` and ``POST /v1/models/switch``
(timed until its 200), for each strategy: ``base-a <-> base-b`` ``2 x rounds`` times, and for ``reconfigure`` also
``base-a <-> other`` (the different-architecture swap) and, last, alternating same-architecture swaps while the
engine's RSS is read. In the same run it measures the three floors (memcpy of that many bytes, a page-cache
read of the weight files, safetensors ``get_tensor`` plus a copy of every tensor) and prints each row's warm
median with its ratio to the safetensors floor, and the goals of issue 20 met or missed. vLLM's CPU platform has
no sleep mode, so ``sleep`` is left out here.

Absolute numbers depend on the machine and on what else runs on it; compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx
import msgspec

from benchmarks.result_types import Base, Result
from benchmarks.results import write_result
from benchmarks.servers import first_token_seconds, start_turnout
from benchmarks.switch_times import PHASES, engine_rss_mb, post_switch
from benchmarks.weight_models import (
    OTHER_SHAPE,
    SAME_SHAPE,
    Floors,
    WeightModel,
    build_weight_models,
    default_cache_dir,
    measure_floors,
)

__all__ = ["Row", "RowSummary", "Sample", "SwitchWeights", "SwitchWeightsConfig", "main", "page_section"]

STRATEGIES = ("stop", "reconfigure", "keep")
MODELS = (
    WeightModel(name="base-a", shape=SAME_SHAPE, seed=1),
    WeightModel(name="base-b", shape=SAME_SHAPE, seed=2),
    WeightModel(name="other", shape=OTHER_SHAPE, seed=3),
)
#: Engine arguments of every model: float32 (as built), eager, a fixed 256 MiB KV cache (2 x max_model_len).
ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 1024,
    "max_num_seqs": 4,
    "kv_cache_memory_bytes": 256 * 2**20,
    "enforce_eager": True,
}
#: Issue 20's goals: (row or ratio, at most).
GOALS = {
    "reconfigure, same arch / safetensors floor": 1.5,
    "reconfigure, other arch / safetensors floor": 2.5,
    "reconfigure first switch / warm": 1.2,
    "engine RSS drift over the alternating swaps": 0.05,
}
TOKEN = "switch-weights-benchmark"
RESULT = "switch_weights"


class Sample(Base, frozen=True, kw_only=True):
    """One measured switch."""

    target: str
    switch_ms: float
    ttft_ms: float
    engine_rss_mb: float
    method: str | None
    phases: dict[str, float | None]


class RowSummary(Base, frozen=True, kw_only=True):
    """A row's warm medians in milliseconds (None: not measured) and its ratios to the floors."""

    label: str
    first_switch_ms: float | None
    switch_ms: float | None
    ttft_ms: float | None
    drain_ms: float | None
    unload_ms: float | None
    load_ms: float | None
    kv_cache_ms: float | None
    frontend_ms: float | None
    methods: list[str]
    engine_rss_mb: float | None
    over_safetensors: float | None
    over_memcpy: float | None
    #: The switch over the CPU load floor (safetensors copy plus GEMM packing; None where not measured).
    over_cpu_load: float | None = None


class Row(Base, frozen=True, kw_only=True):
    """One row of the table: a strategy on one kind of swap, every switch in order (the first is the cold one)."""

    label: str
    samples: list[Sample] = msgspec.field(default_factory=list)

    def summary(self, floors: Floors) -> RowSummary:
        warm = self.samples[1:] or self.samples

        def median(values: list[float | None]) -> float | None:
            present = [v for v in values if v is not None]
            return round(statistics.median(present), 1) if present else None

        switch_ms = median([s.switch_ms for s in warm])
        return RowSummary(
            label=self.label,
            first_switch_ms=self.samples[0].switch_ms if self.samples else None,
            switch_ms=switch_ms,
            ttft_ms=median([s.ttft_ms for s in warm]),
            **{phase: median([s.phases.get(phase) for s in warm]) for phase in PHASES},
            methods=sorted({str(s.method) for s in warm}),
            engine_rss_mb=median([s.engine_rss_mb for s in warm]),
            over_safetensors=round(switch_ms / floors.safetensors_copy_ms, 2) if switch_ms else None,
            over_memcpy=round(switch_ms / floors.memcpy_ms, 2) if switch_ms else None,
            over_cpu_load=_ratio(switch_ms, floors.cpu_load_ms),
        )


class SwitchWeightsOptions(Base, frozen=True, kw_only=True):
    """The benchmark's options (its command-line defaults)."""

    rounds: int = 2
    rss_switches: int = 20


class SwitchWeightsConfig(SwitchWeightsOptions, frozen=True, kw_only=True):
    """The options and the engine arguments every model ran with."""

    engine_args: dict[str, Any]


class SwitchWeights(Result, frozen=True, kw_only=True):
    """``switch_weights*.json``: the floors, each row's summary and samples, and issue 20's goals.

    Attributes:
        measured: Each goal's measured ratio (None: not measured, which misses the goal).
        goal_limits: Each goal's bound (at most).
    """

    floors: Floors
    summary: dict[str, RowSummary]
    measured: dict[str, float | None]
    goal_limits: dict[str, float]
    goals: dict[str, bool]
    rows: list[Row]
    config: SwitchWeightsConfig


def _profile(strategy: str, paths: dict[str, Path], folder: Path) -> Path:
    from server.tinymodels.spec import TEMPLATES_DIR

    models = {
        name: {"model": str(path), "chat_template": str(TEMPLATES_DIR / "tiny-bracket.jinja"), **ENGINE_ARGS}
        for name, path in paths.items()
    }
    switching: dict[str, Any] = {"strategy": strategy, "drain_timeout": 30}
    if strategy == "keep":
        switching["max_active"] = 2
    path = folder / f"weights-{strategy}.json"
    path.write_text(json.dumps({"default_model": MODELS[0].name, "models": models, "switching": switching}))
    return path


def _switches(client: httpx.Client, server: Any, row: Row, targets: list[str], verbose: bool = True) -> None:
    for target in targets:
        switch_ms, report = post_switch(client, target, TOKEN)
        ttft_ms = first_token_seconds(client, target) * 1000.0
        sample = Sample(
            target=target,
            switch_ms=round(switch_ms, 1),
            ttft_ms=round(ttft_ms, 1),
            engine_rss_mb=round(engine_rss_mb(server), 1),
            method=report.get("method"),
            phases={phase: report.get(phase) for phase in PHASES},
        )
        row.samples.append(sample)
        if verbose:
            print(
                f"  {row.label:<28} -> {target:<6} {sample.switch_ms:8.0f} ms  ttft {sample.ttft_ms:6.0f} ms  "
                f"method {sample.method}  engines {sample.engine_rss_mb:.0f} MB",
                flush=True,
            )


def measure(strategy: str, rounds: int, rss_switches: int, paths: dict[str, Path], folder: Path) -> list[Row]:
    """The rows of ``strategy``: same-architecture swaps, and for ``reconfigure`` the others too."""
    a, b, other = (model.name for model in MODELS)
    server = start_turnout(
        _profile(strategy, paths, folder),
        folder,
        label=f"serve-{strategy}",
        extra=("--log-level", "warning"),
        env={"TURNOUT_ADMIN_TOKEN": TOKEN},
    )
    try:
        print(f"  server ready in {server.wait_ready(timeout=1200):.1f} s", flush=True)
        rows = [Row(label=f"{strategy}, same arch")]
        with httpx.Client(base_url=server.url, timeout=1200) as client:
            first_token_seconds(client, a)  # the first request warms the frontend up
            _switches(client, server, rows[0], [b, a] * rounds)
            if strategy == "reconfigure":
                rows.append(Row(label=f"{strategy}, other arch"))
                _switches(client, server, rows[1], [other, a] * rounds)
                if rss_switches:
                    rows.append(Row(label=f"{strategy}, RSS drift"))
                    _switches(client, server, rows[2], [b, a] * (rss_switches // 2), verbose=False)
        return rows
    finally:
        server.stop()


def _ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 2) if value is not None and base else None


def report(rows: list[Row], floors: Floors, config: SwitchWeightsConfig) -> SwitchWeights:
    """Print the table, the floors and the goals; return the result."""
    summaries = {row.label: row.summary(floors) for row in rows if not row.label.endswith("RSS drift")}
    columns = (
        "switch_ms",
        "first_switch_ms",
        "over_safetensors",
        "over_cpu_load",
        "ttft_ms",
        *PHASES,
        "engine_rss_mb",
    )
    print(
        f"\nfloors for {floors.weight_bytes / 2**30:.2f} GiB: memcpy {floors.memcpy_ms} ms, page-cache read "
        f"{floors.page_cache_read_ms} ms, safetensors get_tensor + copy {floors.safetensors_copy_ms} ms, "
        f"CPU GEMM packing {floors.cpu_gemm_packing_ms} ms (copy + packing: {floors.cpu_load_ms} ms)\n"
    )
    print(f"{'row':<26}" + "".join(f"{c:>17}" for c in columns) + "  method")
    for label, s in summaries.items():
        figures = msgspec.structs.asdict(s)
        cells = "".join(f"{'-' if figures[c] is None else figures[c]:>17}" for c in columns)
        print(f"{label:<26}{cells}  {','.join(s.methods)}")
    same, other = summaries.get("reconfigure, same arch"), summaries.get("reconfigure, other arch")
    drift_row = next((row for row in rows if row.label.endswith("RSS drift")), None)
    drift = None
    if drift_row is not None and drift_row.samples:
        first = drift_row.samples[0].engine_rss_mb
        drift = round(max(abs(s.engine_rss_mb - first) / first for s in drift_row.samples), 4)
    measured = {
        "reconfigure, same arch / safetensors floor": same.over_safetensors if same else None,
        "reconfigure, other arch / safetensors floor": other.over_safetensors if other else None,
        "reconfigure first switch / warm": _ratio(same.first_switch_ms, same.switch_ms) if same else None,
        "engine RSS drift over the alternating swaps": drift,
    }
    goals = {name: value is not None and value <= GOALS[name] for name, value in measured.items()}
    print()
    for name, value in measured.items():
        print(f"{name}: {value} (goal <= {GOALS[name]}: {'met' if goals[name] else 'NOT met'})")
    return SwitchWeights(
        floors=floors, summary=summaries, measured=measured, goal_limits=GOALS, goals=goals, rows=rows, config=config
    )


def main(argv: list[str] | None = None) -> SwitchWeights:
    """Build the models (once), measure the floors and the strategies, print and write the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = SwitchWeightsOptions()
    parser.add_argument(
        "--rounds", type=int, default=defaults.rounds, help="round trips per row (base-a -> base-b -> base-a)"
    )
    parser.add_argument(
        "--rss-switches", type=int, default=defaults.rss_switches, help="alternating swaps for the RSS drift (0: none)"
    )
    parser.add_argument(
        "--strategies", default=",".join(STRATEGIES), help="comma-separated, from " + ",".join(STRATEGIES)
    )
    parser.add_argument("--cache", type=Path, default=None, help="where the models are built (default: .cache)")
    args = parser.parse_args(argv)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if unknown := set(strategies) - set(STRATEGIES):
        parser.error(f"unknown strategies {sorted(unknown)}")
    from server.tinymodels import build_tiny_models

    tokenizer_from = build_tiny_models()["tiny-plain"]
    paths = build_weight_models(MODELS, args.cache or default_cache_dir(), tokenizer_from)
    floors = measure_floors(paths[MODELS[0].name])
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="turnout-switch-weights-") as tmp:
        for strategy in strategies:
            print(f"{strategy}:", flush=True)
            rows += measure(strategy, args.rounds, args.rss_switches, paths, Path(tmp))
    config = SwitchWeightsConfig(rounds=args.rounds, rss_switches=args.rss_switches, engine_args=ENGINE_ARGS)
    results = report(rows, floors, config)
    print(f"\nwrote {write_result(RESULT, results)}")
    return results


def _table_rows(data: SwitchWeights) -> list[list[str]]:
    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:,.0f}"

    return [
        [
            label,
            fmt(s.switch_ms),
            fmt(s.first_switch_ms),
            f"**{s.over_safetensors}x**" if s.over_safetensors is not None else "n/a",
            f"{s.over_cpu_load}x" if s.over_cpu_load is not None else "n/a",
            fmt(s.load_ms),
            fmt(s.kv_cache_ms),
            fmt(s.unload_ms),
            ", ".join(s.methods),
            fmt(s.engine_rss_mb),
        ]
        for label, s in data.summary.items()
    ]


_HEADER = (
    "row",
    "warm switch ms",
    "first switch ms",
    "x safetensors floor",
    "x copy + CPU packing floor",
    "load ms",
    "KV cache ms",
    "unload ms",
    "method",
    "engines RSS MB",
)


def page_section(data: SwitchWeights | None, before: SwitchWeights | None = None) -> list[str]:
    """The docs page's section (``benchmarks/docs_page.py``): the table with the floors, then the goals."""
    lines = ["## Switches at realistic weight sizes (1 GiB float32 Llamas)", ""]
    if data is None:
        return [*lines, "**Not measured** in this run (`python -m benchmarks.switch_weights`).", ""]
    for title, result in (("Before", before), ("Now", data)):
        if result is None:
            continue
        f = result.floors
        lines += [
            f"{title} ({result.machine.date}, commit `{result.machine.turnout_commit}`): floors for "
            f"{f.weight_bytes / 2**30:.2f} GiB, measured in the same run: memcpy {f.memcpy_ms} ms, page-cache "
            f"read {f.page_cache_read_ms} ms, safetensors get_tensor + copy **{f.safetensors_copy_ms} ms**"
            + (
                "."
                if f.cpu_gemm_packing_ms is None
                else f"; vLLM's CPU GEMM packing of the linear weights {f.cpu_gemm_packing_ms} ms (copy + packing: "
                f"**{f.cpu_load_ms} ms**, the least any CPU load costs; CUDA and HPU do not pack)."
            ),
            "",
            "| " + " | ".join(_HEADER) + " |",
            "|" + "---|" * len(_HEADER),
            *["| " + " | ".join(row) + " |" for row in _table_rows(result)],
            "",
        ]
    lines += [
        f"- **{'Met' if met else 'MISSED'}**: {name} <= {data.goal_limits[name]} (measured {data.measured[name]})"
        for name, met in data.goals.items()
    ]
    return [*lines, ""]


if __name__ == "__main__":
    main()
