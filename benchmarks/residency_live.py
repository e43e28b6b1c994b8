"""The live half of the residency evidence: ``turnout simulate --live`` replays against the real server, beside the
simulation at that server's measured costs.

    .venv/bin/python -m benchmarks.residency_live [--minutes 3] [--replays 3] [--quick]

``turnout serve`` runs (a fresh HOME, its own state folder) a profile of three tiny models, the demo's two and a
second engine of ``tiny-plain``, under ``keep`` with ``max_active: 2`` in ``auto`` mode: the third model to be asked
for evicts one. The trace is ``benchmarks/residency_policies.py``'s synthetic multi-team traffic (bursts arriving as
a Poisson process, Zipf(1) popularity), a few minutes of it, with short prompts and outputs that fit the tiny
models. A warm-up asks each model in turn, twice, so the server's cost book (``GET /admin/costs``) holds measured
cold and warm costs (the start-up model is unloaded before its first turn, so that its cold cost is a reload's, not
the start-up's provisional one), and times one request's decoding (tokens per second, passed as
``--decode-tps``). Then, as a user would, ``turnout simulate PROFILE --trace F --costs URL --json`` simulates the
trace once, and ``turnout simulate ... --live URL --json`` replays it ``--replays`` times (each replay's own
simulation, from the same start, is kept beside it). Before each, the server is brought to the simulation's start:
the default model active and alone (``turnout unload`` for the others).

It prints the simulation's switches and p99 wait, each replay's, their median and the ratios median/simulation,
met when both lie within 30 % (issue 50's goal), and writes ``results/residency_live.json``. The machine is shared
and has two cores: the replays' timing follows whatever else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks import residency_policies
from benchmarks.result_types import Base, Result
from benchmarks.results import write_result
from benchmarks.servers import ServerProcess, start_turnout
from server.engine.simulation import TraceRequest

__all__ = [
    "ReplayFigures",
    "ResidencyLive",
    "ResidencyLiveOptions",
    "live_profile",
    "live_trace",
    "main",
    "page_section",
    "within_band",
    "write_trace",
]

RESULT = "residency_live"
#: The goal: the replays' median within this share of the simulation's switches and p99 wait.
BAND = 0.3
TOKEN = "residency-live-benchmark"
#: The profile's models (the default first): the demo's two and a second engine of ``tiny-plain``.
MODELS = ("tools", "plain", "plain-b")
MAX_ACTIVE = 2
#: Token ranges that fit the tiny models' ``max_model_len`` (1024).
PROMPT_TOKENS = (16, 160)
OUTPUT_TOKENS = (8, 64)
_DECODE_PROBE_TOKENS = 256


class ResidencyLiveOptions(Base, frozen=True, kw_only=True):
    """The command line's defaults (``run_all`` spells them out)."""

    minutes: float = 3.0
    replays: int = 3
    seed: int = 7
    bursts_per_minute: float = 3.0
    mean_burst: float = 4.0
    #: Warm-up rounds over the models (each model cold at least once).
    warmups: int = 2


class ReplayFigures(Base, frozen=True, kw_only=True):
    """One run's overall figures, as ``turnout simulate --json`` prints them."""

    requests: int
    switches: int
    switch_s: float
    wait_p50_s: float
    wait_p99_s: float
    refused: int


class ResidencyLive(Result, frozen=True, kw_only=True):
    """``residency_live.json``: the simulation, each replay (and its own simulation), the medians and the goal."""

    options: ResidencyLiveOptions
    models: list[str]
    trace_requests: int
    decode_tps: float
    #: The measured costs the simulation ran at: model -> path -> mean seconds.
    costs: dict[str, dict[str, float]]
    commands: list[str]
    simulated: ReplayFigures
    live: list[ReplayFigures]
    live_simulated: list[ReplayFigures]
    median_switches: float
    median_wait_p99_s: float
    switch_ratio: float | None
    p99_ratio: float | None
    goal_met: bool


def live_profile(folder: Path) -> Path:
    """The demo's models and a second engine of ``plain``, ``keep`` with ``max_active: 2`` in ``auto`` mode, as a
    JSON profile with absolute paths in ``folder``."""
    from benchmarks.switch_times import demo_models

    _, models = demo_models()
    models["plain-b"] = dict(models["plain"])
    ordered = {name: models[name] for name in MODELS}
    switching = {"mode": "auto", "strategy": "keep", "max_active": MAX_ACTIVE, "drain_timeout": 30}
    path = folder / "profile.json"
    path.write_text(json.dumps({"default_model": MODELS[0], "models": ordered, "switching": switching}, indent=1))
    return path


def live_trace(options: ResidencyLiveOptions) -> list[TraceRequest]:
    """``residency_policies``' synthetic traffic over :data:`MODELS`, ``options.minutes`` of it."""
    shape = residency_policies.Options(
        hours=options.minutes / 60.0, bursts_per_minute=options.bursts_per_minute, mean_burst=options.mean_burst
    )
    return residency_policies.synthetic_trace(
        options.seed, shape, models=MODELS, prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS
    )


def write_trace(path: Path, trace: Sequence[TraceRequest]) -> Path:
    """``trace`` as the CSV ``turnout simulate --trace`` reads."""
    rows = [f"{item.at:.3f},{item.model},{item.prompt_tokens},{item.output_tokens}" for item in trace]
    path.write_text("timestamp,model,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return path


def _stream(client: httpx.Client, model: str, max_tokens: int) -> tuple[float, float]:
    """A streamed completion of exactly ``max_tokens`` tokens: (seconds to its first data event, to its end)."""
    body = {"model": model, "prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    start = time.monotonic()
    first: float | None = None
    with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data:"):
                first = time.monotonic() - start
    return first or 0.0, time.monotonic() - start


def _warm_up(server: ServerProcess, rounds: int, folder: Path, env: dict[str, str]) -> float:
    """Ask each model in turn ``rounds`` times (cold and warm switches measured), the start-up model unloaded
    before its first turn so that its cold cost is a reload's (the start-up's is provisional); the decoding rate
    in tokens/s."""
    with httpx.Client(base_url=server.url, timeout=900.0) as client:
        for round_ in range(rounds):
            for model in (*MODELS[1:], MODELS[0]):
                if round_ == 0 and model == MODELS[0] and _holds(server, model):
                    _turnout(folder, env, "unload", model, "--url", server.url, timeout=300)
                started = time.monotonic()
                _stream(client, model, 4)
                print(f"  warm-up: {model} answered in {time.monotonic() - started:.1f} s", flush=True)
        # Over the whole request (its prompt is one word): a stream may deliver several tokens in one event, and
        # timing from the first event once read 91,000 tokens/s.
        rates = []
        for _ in range(3):
            _, end = _stream(client, MODELS[0], _DECODE_PROBE_TOKENS)
            rates.append(_DECODE_PROBE_TOKENS / max(end, 1e-6))
    return statistics.median(rates)


def _holds(server: ServerProcess, model: str) -> bool:
    """Whether ``model`` holds an engine now (active or resident)."""
    slots = _admin(server, "/admin/status").get("slots", [])
    return any(slot.get("name") == model and slot.get("state") in ("active", "resident") for slot in slots)


def _admin(server: ServerProcess, route: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    answer: dict[str, Any] = httpx.get(f"{server.url}{route}", headers=headers, timeout=60).raise_for_status().json()
    return answer


def _turnout(folder: Path, env: dict[str, str], *args: str, timeout: float) -> str:
    """``turnout ARGS`` as a user runs it, in ``folder``; its standard output (exits on failure, with stderr)."""
    turnout = Path(sys.executable).parent / "turnout"
    done = subprocess.run(
        [str(turnout), *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"turnout {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def _reset(server: ServerProcess, folder: Path, env: dict[str, str]) -> None:
    """Bring the server to the simulation's start: the default model active and the only one holding an engine."""
    with httpx.Client(base_url=server.url, timeout=900.0) as client:
        _stream(client, MODELS[0], 1)
    for slot in _admin(server, "/admin/status").get("slots", []):
        if slot.get("name") != MODELS[0] and slot.get("state") == "resident":
            _turnout(folder, env, "unload", slot["name"], "--url", server.url, timeout=300)
    slots = _admin(server, "/admin/status")["slots"]
    held = [slot["name"] for slot in slots if slot.get("state") in ("active", "resident")]
    print(f"  reset: holding {held}", flush=True)


def _figures(outcome: dict[str, Any]) -> ReplayFigures:
    overall = outcome["overall"]
    return ReplayFigures(**{name: overall[name] for name in ReplayFigures.__struct_fields__})


def within_band(value: float, reference: float) -> bool:
    """``value`` lies within :data:`BAND` of ``reference`` (compared unrounded: a ratio rounded to 0.7 would
    read as just outside)."""
    return abs(value - reference) <= BAND * reference


def _ratio(value: float, reference: float) -> float | None:
    return round(value / reference, 3) if reference > 0 else None


def run(options: ResidencyLiveOptions) -> ResidencyLive:
    """Start the server, warm it, simulate and replay; see the module docstring."""
    from server.tinymodels import build_tiny_models

    build_tiny_models()
    trace = live_trace(options)
    with tempfile.TemporaryDirectory(prefix="residency-live-") as tmp:
        folder = Path(tmp)
        home = folder / "home"
        home.mkdir()
        env = {key: value for key, value in os.environ.items() if not key.startswith(("TURNOUT_", "XDG_"))}
        env |= {"HOME": str(home), "TURNOUT_ADMIN_TOKEN": TOKEN}
        live_profile(folder)
        write_trace(folder / "trace.csv", trace)
        server = start_turnout(
            folder / "profile.json",
            folder,
            label="turnout-residency-live",
            extra=("--log-level", "warning"),
            env={"HOME": str(home), "XDG_STATE_HOME": str(home / ".local" / "state"), "TURNOUT_ADMIN_TOKEN": TOKEN},
        )
        try:
            server.wait_ready()
            decode_tps = round(_warm_up(server, options.warmups, folder, env), 1)
            costs = {
                model: {path: round(cost["mean_s"], 4) for path, cost in paths.items() if cost}
                for model, paths in _admin(server, "/admin/costs")["models"].items()
            }
            print(f"measured costs {costs}; decoding {decode_tps} tokens/s", flush=True)
            base = ["simulate", "profile.json", "--trace", "trace.csv", "--costs", server.url]
            base += ["--decode-tps", str(decode_tps), "--json"]
            _reset(server, folder, env)
            simulated = _figures(json.loads(_turnout(folder, env, *base, timeout=300))["policies"]["cost"])
            print(f"simulated: {simulated}", flush=True)
            live: list[ReplayFigures] = []
            live_simulated: list[ReplayFigures] = []
            for index in range(options.replays):
                _reset(server, folder, env)
                out = _turnout(folder, env, *base, "--live", server.url, timeout=options.minutes * 60 + 1800)
                policies = json.loads(out)["policies"]
                live.append(_figures(policies["live"]))
                live_simulated.append(_figures(policies["cost"]))
                print(f"replay {index + 1}: live {live[-1]}\n          its simulation {live_simulated[-1]}", flush=True)
        finally:
            server.stop()
    median_switches = statistics.median(item.switches for item in live)
    median_p99 = statistics.median(item.wait_p99_s for item in live)
    switch_ratio = _ratio(median_switches, simulated.switches)
    p99_ratio = _ratio(median_p99, simulated.wait_p99_s)
    within = [within_band(median_switches, simulated.switches), within_band(median_p99, simulated.wait_p99_s)]
    shown = [arg if arg != server.url else "URL" for arg in base]
    return ResidencyLive(
        options=options,
        models=list(MODELS),
        trace_requests=len(trace),
        decode_tps=decode_tps,
        costs=costs,
        commands=[
            "turnout " + " ".join(shown),
            "turnout " + " ".join([*shown, "--live", "URL"]),
        ],
        simulated=simulated,
        live=live,
        live_simulated=live_simulated,
        median_switches=median_switches,
        median_wait_p99_s=round(median_p99, 3),
        switch_ratio=switch_ratio,
        p99_ratio=p99_ratio,
        goal_met=all(within),
    )


def page_section(data: ResidencyLive | None) -> list[str]:
    """The docs page's section (``benchmarks/docs_page.py``)."""
    lines = ["## Residency live: replays against the simulation", ""]
    if data is None:
        return [*lines, "**Not measured** in this run (`python -m benchmarks.residency_live`).", ""]
    o = data.options
    costs = "; ".join(
        f"{model} " + ", ".join(f"{path} {seconds:.2f} s" for path, seconds in paths.items())
        for model, paths in data.costs.items()
    )
    rows = [("simulation", data.simulated)]
    rows += [(f"replay {index + 1}", item) for index, item in enumerate(data.live)]
    rows += [(f"replay {index + 1}'s own simulation", item) for index, item in enumerate(data.live_simulated)]
    lines += [
        f"`python -m benchmarks.residency_live` ({data.machine.date}, commit `{data.machine.turnout_commit}`): "
        f"`turnout serve` with {len(data.models)} tiny models ({', '.join(data.models)}), `keep` with "
        f"`max_active: {MAX_ACTIVE}` in `auto` mode; {o.minutes:g} minutes of synthetic multi-team traffic "
        f"(seed {o.seed}, {data.trace_requests} requests, {o.bursts_per_minute:g} bursts a minute, "
        f"{o.mean_burst:g} requests a burst on average, Zipf(1) popularity), replayed {o.replays} times. The "
        f"simulation ran at the server's measured costs ({costs}) and its measured decoding, "
        f"{data.decode_tps:g} tokens/s. The machine is shared with other sessions and has 2 cores: the replays "
        "keep whatever else ran beside them (`docs/residency.md` gives the method).",
        "",
        "```",
        *data.commands,
        "```",
        "",
        "| run | requests | switches | switch s | p50 wait s | p99 wait s | refused |",
        "|---|---|---|---|---|---|---|",
        *[
            f"| {name} | {r.requests} | {r.switches} | {r.switch_s:g} | {r.wait_p50_s:g} | {r.wait_p99_s:g} | "
            f"{r.refused} |"
            for name, r in rows
        ],
        "",
        f"- **{'Met' if data.goal_met else 'MISSED'}**: the median of the replays within {BAND:.0%} of the "
        f"simulation's switches and p99 wait (median {data.median_switches:g} switches, "
        f"{_shown(data.switch_ratio)} the simulation's; p99 wait {data.median_wait_p99_s:g} s, "
        f"{_shown(data.p99_ratio)}: {abs(data.median_wait_p99_s - data.simulated.wait_p99_s):.3f} s from the "
        f"simulation's, where {BAND:.0%} is {BAND * data.simulated.wait_p99_s:.3f} s).",
        "",
    ]
    return lines


def _shown(ratio: float | None) -> str:
    return f"{ratio:g}x" if ratio is not None else "n/a (the simulation's is 0)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print its table and write ``benchmarks/results/residency_live.json``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = ResidencyLiveOptions()
    for name in ResidencyLiveOptions.__struct_fields__:
        default = getattr(defaults, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument("--quick", action="store_true", help="A short try: one minute, one replay, one warm-up.")
    args = parser.parse_args(argv)
    given = {name: getattr(args, name) for name in ResidencyLiveOptions.__struct_fields__}
    if args.quick:
        given |= {"minutes": 1.0, "replays": 1, "warmups": 1}
    result = run(ResidencyLiveOptions(**given))
    for line in page_section(result)[2:]:
        print(line)
    print(f"wrote {write_result(RESULT, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
