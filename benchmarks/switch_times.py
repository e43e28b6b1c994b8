"""Switch times of ``stop``, ``reconfigure`` and ``keep`` on the demo models, measured through the real server.

    .venv/bin/python -m benchmarks.switch_times [--rounds 3] [--json-out switch_times.json]

For each strategy it starts ``turnout serve`` on the demo profile with that strategy, then switches between the
two demo models ``2 x rounds`` times with ``POST /v1/models/switch`` (timed until the 200 arrives) and after each
switch times the first token of a streamed chat on the new model. It prints the switch reports' phase breakdown,
the engine processes' RSS, and the ratios to ``stop`` measured in the same run (the issue's goal: a warm
``reconfigure`` switch at most 0.08x a ``stop`` switch). The first switch of ``keep`` (it starts the second
engine) and of ``reconfigure`` (its first unload walks the worker's whole heap once) are reported apart as cold.

Absolute numbers depend on the machine and on what else runs on it; compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psutil

from benchmarks.result_types import StrategySummary, Switch, SwitchTimes, SwitchTimesOptions
from benchmarks.servers import DEMO_PROFILE, ServerProcess, first_token_seconds, start_turnout

STRATEGIES = ("stop", "reconfigure", "keep")
PHASES = ("drain_ms", "unload_ms", "load_ms", "kv_cache_ms", "frontend_ms")
TOKEN = "switch-times-benchmark"
GOAL = 0.08


@dataclass
class StrategyRun:
    """Every switch of one strategy, cold ones first."""

    strategy: str
    start_s: float
    switches: list[Switch] = field(default_factory=list)

    def warm(self) -> list[Switch]:
        # keep's first switch starts the second engine; reconfigure's first unload collects the whole heap once.
        return (
            self.switches[1:] if self.strategy in ("keep", "reconfigure") and len(self.switches) > 1 else self.switches
        )

    def median(self, read: Callable[[Switch], Any], switches: list[Switch] | None = None) -> float | None:
        values = [v for v in (read(s) for s in (switches if switches is not None else self.warm())) if v is not None]
        return round(statistics.median(values), 1) if values else None

    def summary(self) -> StrategySummary:
        warm = self.warm()
        return StrategySummary(
            engine_start_s=round(self.start_s, 1),
            cold_switch_ms=self.switches[0].switch_ms if self.switches and warm is not self.switches else None,
            switch_ms=self.median(lambda s: s.switch_ms),
            server_duration_ms=self.median(lambda s: s.report.get("duration_ms")),
            ttft_ms=self.median(lambda s: s.ttft_ms),
            engine_rss_mb=self.median(lambda s: s.engine_rss_mb),
            methods=sorted({str(s.report.get("method")) for s in warm}),
            **{phase: self.median(_reported(phase)) for phase in PHASES},
        )


def _reported(key: str) -> Callable[[Switch], Any]:
    """Reads ``key`` of a switch's server report (one reader per phase, so each lambda keeps its own key)."""
    return lambda switch: switch.report.get(key)


def demo_models() -> tuple[str, dict[str, dict[str, Any]]]:
    """The demo profile's default model and its models as JSON profile entries (absolute paths)."""
    from server.profiles import load_profile

    demo = load_profile(DEMO_PROFILE)
    models: dict[str, dict[str, Any]] = {}
    for name, model in demo.models.items():
        entry: dict[str, Any] = {"model": model.model, **model.engine_args}
        for key in ("chat_template", "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser"):
            if getattr(model, key) is not None:
                entry[key] = getattr(model, key)
        models[name] = entry
    return demo.default_model, models


def demo_profile(strategy: str, folder: Path, *, default_model: str | None = None) -> Path:
    """The demo profile with ``strategy`` (and ``default_model``, if given), as a JSON profile with absolute paths."""
    demo_default, models = demo_models()
    switching: dict[str, Any] = {"strategy": strategy, "drain_timeout": 30}
    if strategy == "keep":
        switching["max_active"] = 2
    path = folder / f"demo-{strategy}.json"
    path.write_text(
        json.dumps({"default_model": default_model or demo_default, "models": models, "switching": switching})
    )
    return path


def engine_rss_mb(server: ServerProcess) -> float:
    """RSS of the server's engine processes (its children), in MiB."""
    total = 0
    for child in psutil.Process(server.pid).children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total / (1024 * 1024)


def post_switch(client: httpx.Client, target: str, token: str) -> tuple[float, dict[str, Any]]:
    """``POST /v1/models/switch`` to ``target``: milliseconds until its 200, and the switch report.

    Raises:
        RuntimeError: The switch answered anything but 200.
    """
    started = time.perf_counter()
    response = client.post("/v1/models/switch", json={"model": target}, headers={"Authorization": f"Bearer {token}"})
    switch_ms = (time.perf_counter() - started) * 1000.0
    if response.status_code != 200:
        raise RuntimeError(f"switch to {target} answered {response.status_code}: {response.text}")
    report: dict[str, Any] = response.json()
    return switch_ms, report


def measure(strategy: str, rounds: int, folder: Path) -> StrategyRun:
    server = start_turnout(
        demo_profile(strategy, folder),
        folder,
        label=f"serve-{strategy}",
        extra=("--log-level", "warning"),
        env={"TURNOUT_ADMIN_TOKEN": TOKEN},
    )
    try:
        run = StrategyRun(strategy, server.wait_ready())
        with httpx.Client(base_url=server.url, timeout=600) as client:
            first_token_seconds(client, "tools")  # the first request warms the frontend up
            for index in range(rounds * 2):
                target = "plain" if index % 2 == 0 else "tools"
                switch_ms, switch_report = post_switch(client, target, TOKEN)
                ttft = first_token_seconds(client, target) * 1000.0
                switch = Switch(
                    target=target,
                    switch_ms=round(switch_ms, 1),
                    ttft_ms=round(ttft, 1),
                    engine_rss_mb=round(engine_rss_mb(server), 1),
                    report=switch_report,
                )
                run.switches.append(switch)
                print(
                    f"  {strategy:<11} -> {target:<5} {switch.switch_ms:8.0f} ms  ttft {switch.ttft_ms:6.0f} ms  "
                    f"method {switch.report.get('method')}  engines {switch.engine_rss_mb:.0f} MB",
                    flush=True,
                )
        return run
    finally:
        server.stop()


def _cell(value: Any, width: int) -> str:
    return f"{'-' if value is None else value:>{width}}"


def report(runs: dict[str, StrategyRun]) -> SwitchTimes:
    """Print the side-by-side table and the ratios; return the result."""
    summaries = {name: run.summary() for name, run in runs.items()}
    cells = {name: msgspec.structs.asdict(summary) for name, summary in summaries.items()}
    columns = ("switch_ms", "ttft_ms", *PHASES, "engine_rss_mb", "engine_start_s", "cold_switch_ms")
    print()
    print(f"{'strategy':<12}" + "".join(_cell(c, 15) for c in columns) + "  method")
    for name, summary in cells.items():
        print(f"{name:<12}" + "".join(_cell(summary[c], 15) for c in columns) + f"  {','.join(summary['methods'])}")
    ratios: dict[str, float | None] = {}
    stop = cells.get("stop", {}).get("switch_ms")
    for name in ("reconfigure", "keep"):
        value = cells.get(name, {}).get("switch_ms")
        ratios[f"{name}/stop"] = round(value / stop, 4) if value is not None and stop else None
    print()
    for label, ratio in ratios.items():
        goal = (
            f"  (goal <= {GOAL}x: {'met' if ratio is not None and ratio <= GOAL else 'NOT met'})"
            if label == "reconfigure/stop"
            else ""
        )
        print(f"ratio {label}: {ratio}x{goal}")
    return SwitchTimes(
        summary=summaries,
        ratios=ratios,
        goal_reconfigure_over_stop=GOAL,
        switches={name: run.switches for name, run in runs.items()},
    )


def main(argv: list[str] | None = None) -> SwitchTimes:
    """Run the benchmark; returns (and optionally writes) the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rounds",
        type=int,
        default=SwitchTimesOptions().rounds,
        help="round trips (tools -> plain -> tools) per strategy",
    )
    parser.add_argument(
        "--strategies", default=",".join(STRATEGIES), help="comma-separated, from stop,reconfigure,keep"
    )
    parser.add_argument("--json-out", type=Path, default=None, help="also write the results here as JSON")
    args = parser.parse_args(argv)
    from server.tinymodels import build_tiny_models

    build_tiny_models()
    runs: dict[str, StrategyRun] = {}
    with tempfile.TemporaryDirectory(prefix="turnout-switch-times-") as tmp:
        for strategy in [s.strip() for s in args.strategies.split(",") if s.strip()]:
            if strategy not in STRATEGIES:
                parser.error(f"unknown strategy {strategy!r}")
            print(f"{strategy}:", flush=True)
            runs[strategy] = measure(strategy, args.rounds, Path(tmp))
    results = report(runs)
    if args.json_out is not None:
        args.json_out.write_bytes(msgspec.json.format(msgspec.json.encode(results), indent=2))
        print(f"\nwrote {args.json_out}")
    return results


if __name__ == "__main__":
    main()
