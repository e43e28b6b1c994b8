"""``turnout simulate PROFILE --trace FILE``: how a recorded trace would run on the profile's models, before an
operator buys or shares a card.

The profile is loaded and checked as ``turnout validate`` does (no vLLM import, no engine); its footprints, memory
budget and strategy are the plan ``turnout validate --plan`` prints. The trace goes through the real scheduler and
residency policy on a fake clock (``server/engine/simulation``), at the reload costs of ``--costs`` (a running
server's ``/admin/costs``, or its saved ``reload-costs.json``, or a file written in that shape); a model the costs
do not name is simulated at :data:`ASSUMED_COSTS` and the output says so.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx
import msgspec
from rich.table import Table

from server.cli._output import err_console, out_console
from server.cli.plan_report import build_plan_report, read_memory
from server.engine import (
    ASSUMED_COSTS,
    CostBook,
    CostsDocument,
    Outcome,
    SimulatedModel,
    Simulation,
    TraceInvalid,
    capabilities_of,
    read_trace,
    simulate,
    strongest_change,
)
from server.profiles import DEFAULT_ADMIN_TOKEN_ENV, Profile, guess_platform, validate_profile

__all__ = ["load_costs", "run_simulation", "simulate_command", "simulation_of"]

F = TypeVar("F", bound=Callable[..., Any])


def simulation_of(profile: Profile, costs: CostBook, *, prefill_tps: float, decode_tps: float) -> Simulation:
    """The simulation of ``profile`` on this machine's plan (footprints, budget, strategy), at ``costs``."""
    plan = build_plan_report(profile, platform=guess_platform(), memory=read_memory(guess_platform()), env=os.environ)
    sizes = {item.model: item.total_bytes for item in plan.footprints}
    capabilities = capabilities_of(plan.strategy)
    models = {
        name: SimulatedModel(
            footprint_bytes=sizes.get(name, 0),
            priority=model.priority,
            pinned=model.pinned,
            max_concurrent_requests=model.max_concurrent_requests,
        )
        for name, model in profile.models.items()
    }
    return Simulation(
        models=models,
        switching=profile.switching,
        holds_several=capabilities.serves_several,
        in_place=capabilities.swaps_in_place,
        budget_bytes=plan.budget_bytes if capabilities.budgets_bytes else None,
        costs=costs,
        prefill_tps=prefill_tps,
        decode_tps=decode_tps,
    )


def load_costs(source: str | None, token_env: str) -> CostBook:
    """The costs of ``source``: a server's URL (its ``/admin/costs``, with the admin token as ``turnout status``
    reads it), a file in that shape, or nothing (an empty book)."""
    if source is None:
        return CostBook()
    if source.startswith(("http://", "https://")):
        from server.cli.client import admin_get  # httpx and the token reading only when a server is asked

        url = source if source.rstrip("/").endswith("/admin/costs") else f"{source.rstrip('/')}/admin/costs"
        document = msgspec.convert(admin_get(url, token_env), CostsDocument)
    else:
        try:
            document = msgspec.json.decode(Path(source).read_bytes(), type=CostsDocument)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise click.ClickException(f"{source}: not a reload costs file ({exc})") from None
    return CostBook.from_document(document)


def run_simulation(setup: Simulation, trace_path: Path, compare: tuple[str, ...]) -> dict[str, Outcome]:
    """The outcome of the trace under the profile's eviction rule, then under each of ``compare``."""
    try:
        trace = read_trace(trace_path)
    except TraceInvalid as exc:
        raise click.ClickException(str(exc)) from None
    rules = [setup.switching.eviction, *(rule for rule in compare if rule != setup.switching.eviction)]
    return {rule: simulate(setup.with_eviction(rule), trace) for rule in rules}  # type: ignore[arg-type]


def _rate(flag: str, default: float, text: str) -> Callable[[F], F]:
    """A tokens-per-second option."""
    option: Callable[[F], F] = click.option(
        flag, type=click.FloatRange(min=0, min_open=True), default=default, show_default=True, help=text
    )
    return option


@click.command("simulate")
@click.argument("profile", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="CSV (timestamp,model,prompt_tokens,output_tokens) or JSON lines with those keys.",
)
@click.option(
    "--costs",
    "costs_source",
    default=None,
    metavar="URL|FILE",
    help="Reload costs: a server's URL (its /admin/costs) or a reload-costs.json file.",
)
@click.option(
    "--compare",
    type=click.Choice(["cost", "lru"]),
    multiple=True,
    help="Simulate another eviction rule too, side by side.",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"policies": {NAME: {"overall": ..., "models": ...}}}.')
@_rate("--prefill-tps", 2000.0, "Prompt tokens one request's prefill takes per second.")
@_rate("--decode-tps", 30.0, "Tokens one request generates per second.")
@click.option("--live", "live_url", default=None, metavar="URL", help="Also replay the trace against this server.")
@click.option(
    "--speed",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="--live: replay this many times faster than recorded.",
)
@click.option(
    "--token-env",
    default=DEFAULT_ADMIN_TOKEN_ENV,
    show_default=True,
    help="Env var that holds the admin token for --costs URL (as turnout status reads it).",
)
def simulate_command(
    profile: str,
    trace_path: Path,
    costs_source: str | None,
    compare: tuple[str, ...],
    as_json: bool,
    prefill_tps: float,
    decode_tps: float,
    live_url: str | None,
    speed: float,
    token_env: str,
) -> None:
    """Replay a recorded trace on PROFILE's models with the real scheduler and residency policy on a fake clock."""
    result = validate_profile(profile, env=os.environ)
    if result.profile is None or result.errors:
        for issue in result.errors:
            click.echo(f"{issue.file}:{issue.line}:{issue.col}: error: {issue.message}", err=True)
        raise SystemExit(1)
    setup = simulation_of(
        result.profile, load_costs(costs_source, token_env), prefill_tps=prefill_tps, decode_tps=decode_tps
    )
    if live_url is not None:  # simulated from the models the server holds now, as the replay finds them
        setup = dataclasses.replace(setup, start=_held(live_url, token_env))
    policies = run_simulation(setup, trace_path, compare)
    if live_url is not None:
        policies["live"] = _live(live_url, result.profile, trace_path, speed, token_env)
    if as_json:
        click.echo(msgspec.json.encode({"policies": policies}).decode())
        return
    for name, outcome in policies.items():
        out_console.print(_table(name, outcome))
    assumed = setup.assumed()
    if assumed:
        err_console.print(
            f"note: no measured costs for {', '.join(assumed)}; assumed "
            + ", ".join(f"{path} {seconds:g} s" for path, seconds in ASSUMED_COSTS.items()),
            markup=False,
        )
    base = policies[setup.switching.eviction]
    change = strongest_change(setup, read_trace(trace_path), base)
    if change is not None:
        new = change.outcome.overall
        out_console.print(
            f"most effect: {change.change}: switch seconds {base.overall.switch_s:g} -> {new.switch_s:g}, "
            f"p99 wait {base.overall.wait_p99_s:g} s -> {new.wait_p99_s:g} s",
            markup=False,
        )


def _held(url: str, token_env: str) -> tuple[str, ...]:
    """The models the server at ``url`` holds an engine for now, the active one first."""
    from server.cli.client import admin_get

    slots = admin_get(f"{url.rstrip('/')}/admin/status", token_env).get("slots", [])
    order = {"active": 0, "resident": 1}
    held = sorted((slot for slot in slots if slot.get("state") in order), key=lambda slot: order[slot["state"]])
    return tuple(slot["name"] for slot in held)


def _live(url: str, profile: Profile, trace_path: Path, speed: float, token_env: str) -> Outcome:
    """The trace replayed against the server at ``url`` (``live_replay.py``)."""
    from server.api import every_model_key
    from server.cli.admin_token import admin_token
    from server.cli.live_replay import replay

    key = every_model_key(profile, os.environ)
    try:
        return replay(
            url,
            read_trace(trace_path),
            list(profile.models),
            speed=speed,
            admin=admin_token(token_env),
            key=key,
        )
    except httpx.HTTPError as exc:
        raise click.ClickException(f"the live replay against {url} failed: {exc}") from None


def _table(policy: str, outcome: Outcome) -> Table:
    table = Table(title=f"policy {policy}", title_justify="left")
    for column in (
        "model",
        "requests",
        "switches",
        "switch s",
        "p50 wait",
        "p99 wait",
        "max wait",
        "refused",
        "serving",
    ):
        table.add_column(column, justify="left" if column == "model" else "right")
    rows = [*outcome.models.items(), ("(all)", outcome.overall)]
    for name, item in rows:
        table.add_row(
            name,
            str(item.requests),
            str(item.switches),
            f"{item.switch_s:g}",
            f"{item.wait_p50_s:g}",
            f"{item.wait_p99_s:g}",
            f"{item.wait_max_s:g}",
            str(item.refused),
            f"{item.serving_share:.1%}",
        )
    return table
