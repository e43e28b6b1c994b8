"""``turnout switch``, ``load``, ``unload``, ``status`` and ``reload``: small clients of a running server's admin
routes."""

from __future__ import annotations

import os
from typing import Any

import click
import httpx
from rich.table import Table

from server.cli._output import err_console, out_console
from server.profiles import DEFAULT_ADMIN_TOKEN_ENV, describe_size, describe_start

__all__ = ["admin_get", "load", "reload", "status", "switch", "unload"]

_URL = click.option(
    "--url", default="http://127.0.0.1:8000", show_default=True, envvar="TURNOUT_URL", help="Server URL."
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the raw JSON answer.")
_TOKEN = click.option(
    "--token-env",
    default=DEFAULT_ADMIN_TOKEN_ENV,
    show_default=True,
    help="Env var that holds the admin token, or NAME_FILE a file holding it (never pass secrets on the command "
    "line); with neither set, the token turnout demo or serve generated into the state folder.",
)


def _call(method: str, url: str, token_env: str, *, timeout: float, json: Any = None) -> dict[str, Any]:
    from server.cli.admin_token import admin_token  # the server's secret reading: Litestar's import, a few 100 ms

    token = admin_token(token_env)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.request(method, url, json=json, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        err_console.print(f"error: cannot reach {url}: {exc}", markup=False)
        raise SystemExit(1) from None
    try:
        body: dict[str, Any] = response.json()
    except ValueError:
        body = {"error": {"message": response.text[:200]}}
    if response.status_code >= 400:
        message = body.get("error", {}).get("message", response.reason_phrase)
        if response.status_code in (401, 403) and not token:
            # The server's words are about the header; the cause is this shell's environment.
            message = (
                f"neither ${token_env} nor ${token_env}_FILE is set here, and no generated token is in the state "
                f"folder, so no admin token was sent; export one of them (a server that generates its token prints "
                f"where it is) or name another variable with --token-env (the server said: {message})"
            )
        # Plain echo, not rich: each file:line:col issue of a refused reload stays one greppable line.
        click.echo(f"error: {response.status_code}: {message}", err=True)
        raise SystemExit(1)
    return body


@click.command()
@click.argument("model")
@click.option("--drain-timeout", type=float, default=None, help="Seconds to drain in-flight requests.")
@_URL
@_TOKEN
@_JSON
def switch(model: str, drain_timeout: float | None, url: str, token_env: str, as_json: bool) -> None:
    """Switch the server at --url to MODEL and print one line on what happened (--json: the whole report)."""
    payload: dict[str, Any] = {"model": model}
    if drain_timeout is not None:
        payload["drain_timeout"] = drain_timeout
    report = _call("POST", f"{url.rstrip('/')}/v1/models/switch", token_env, timeout=3600.0, json=payload)
    if as_json:
        out_console.print_json(data=report)
        return
    out_console.print(_switch_line(report), markup=False)


def _switch_line(report: dict[str, Any]) -> str:
    """``switched a -> b in 812 ms (drain 0 ms, freed 120 MiB)``: the report's facts that are set."""
    current, previous = report.get("current_model"), report.get("previous_model")
    if not report.get("switched"):
        return f"{current} is already active (nothing to do)"
    what = f"loaded {current}" if previous is None else f"switched {previous} -> {current}"
    details = [f"drain {report.get('drain_ms', 0):.0f} ms"]
    if report.get("aborted_requests"):
        details.append(f"{report['aborted_requests']} aborted")
    if report.get("method"):
        details.append(f"method {report['method']}")
    if report.get("freed_memory_mb") is not None:
        details.append(f"freed {report['freed_memory_mb']:.0f} MB")
    return f"{what} in {report.get('duration_ms', 0):.0f} ms ({', '.join(details)})"


@click.command()
@click.argument("model")
@_URL
@_TOKEN
@_JSON
def load(model: str, url: str, token_env: str, as_json: bool) -> None:
    """Load MODEL on the server at --url without activating it (it stays resident, ready to switch to)."""
    _print_residency(_call("POST", f"{url.rstrip('/')}/admin/models/{model}/load", token_env, timeout=3600.0), as_json)


@click.command()
@click.argument("model")
@click.option("--force", is_flag=True, help="Unload the active model too (manual mode; no model is active after).")
@click.option("--drain-timeout", type=float, default=None, help="Seconds to drain the active model's requests.")
@_URL
@_TOKEN
@_JSON
def unload(model: str, force: bool, drain_timeout: float | None, url: str, token_env: str, as_json: bool) -> None:
    """Free MODEL's engine on the server at --url."""
    payload: dict[str, Any] = {"force": force}
    if drain_timeout is not None:
        payload["drain_timeout"] = drain_timeout
    path = f"{url.rstrip('/')}/admin/models/{model}/unload"
    _print_residency(_call("POST", path, token_env, timeout=3600.0, json=payload), as_json)


def _print_residency(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        out_console.print_json(data=report)
        return
    done = "" if report["changed"] else " (nothing to do)"
    out_console.print(
        f"{report['action']} {report['model']}{done}: {report['state']} in {report['duration_ms']:.0f} ms; "
        f"active: {report['active_model'] or '-'}",
        markup=False,
    )


def admin_get(url: str, token_env: str) -> dict[str, Any]:
    """``GET url`` of a server's admin route, with the admin token as ``turnout status`` sends it; a refusal or an
    unreachable server ends the command with the reason."""
    return _call("GET", url, token_env, timeout=30.0)


@click.command()
@_URL
@_TOKEN
@_JSON
def status(url: str, token_env: str, as_json: bool) -> None:
    """Show the models of the server at --url, their states and the last switch."""
    snapshot = _call("GET", f"{url.rstrip('/')}/admin/status", token_env, timeout=30.0)
    if as_json:
        out_console.print_json(data=snapshot)
        return
    table = Table("model", "state", "in flight", "queued", "path", "reason")
    for slot in snapshot["slots"]:
        marker = " *" if slot["name"] == snapshot["active_model"] else ""
        reason = slot["reason"] or ""
        if slot.get("retry_in_s") is not None:
            reason = f"{reason} (retried in {slot['retry_in_s']:.0f} s)".strip()
        if slot.get("restart"):
            reason = f"{reason} ({slot['restart']['note']})".strip()
        if slot.get("unloads_in_s") is not None:
            reason = f"{reason} (unloads in {slot['unloads_in_s']:.0f} s)".strip()
        if slot.get("pinned"):
            reason = f"{reason} (pinned)".strip()
        queued = str(slot.get("queued", 0))
        table.add_row(slot["name"] + marker, slot["state"], str(slot["in_flight"]), queued, slot["model"], reason)
    out_console.print(table)
    out_console.print(
        f"active: {snapshot['active_model']}  switching to: {snapshot['switching_to'] or '-'}  "
        f"strategy: {snapshot['strategy']}  mode: {snapshot['mode']}",
        markup=False,
    )
    held, budget = snapshot.get("memory_held_bytes"), (snapshot.get("memory") or {}).get("budget_bytes")
    if held is not None and budget is not None:
        out_console.print(
            f"memory budget: {describe_size(budget)}  held: {describe_size(held)}  "
            f"room left: {describe_size(budget - held)}",
            markup=False,
        )
    attempt = snapshot.get("last_attempt")
    if attempt:
        line = (
            f"last switch attempt: {attempt['source'] or '-'} -> {attempt['target']} ({attempt['trigger']}): "
            f"{attempt['outcome']} in {attempt['duration_ms']:.0f} ms"
        )
        if attempt["error"]:
            line += f": {attempt['error']}"
        out_console.print(line, markup=False)
    verify = (snapshot.get("last_switch") or {}).get("verify")
    if verify:  # the proof of the model the last switch published (switching.verify)
        line = f"last proof: {verify['outcome']} after the {verify['path']} in {verify['duration_ms']:.0f} ms"
        out_console.print(f"{line}: {verify['detail']}" if verify["detail"] else line, markup=False, soft_wrap=True)
    if snapshot.get("faults"):
        out_console.print(f"faults armed (drill): {', '.join(snapshot['faults'])}", markup=False)
    for slot in snapshot["slots"]:
        start = slot.get("last_start")
        if start:  # one line a model: where its last engine start's time went
            line = f"last start of {slot['name']}: {describe_start(start['total_ms'], start['phases_ms'])}"
            out_console.print(line, markup=False, soft_wrap=True)


@click.command()
@click.argument("profile", required=False, type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Validate and show what would change, without applying it.")
@_URL
@_TOKEN
@_JSON
def reload(profile: str | None, dry_run: bool, url: str, token_env: str, as_json: bool) -> None:
    """Apply PROFILE (default: the file the server runs) to the server at --url.

    The server reads the file itself, so PROFILE is a path on the server's machine. Every error is printed at
    file:line:col and nothing changes; exit 1.
    """
    payload: dict[str, Any] = {"dry_run": dry_run}
    if profile is not None:
        payload["path"] = os.path.abspath(profile)
    report = _call("POST", f"{url.rstrip('/')}/admin/reload", token_env, timeout=600.0, json=payload)
    if as_json:
        out_console.print_json(data=report)
        return
    for warning in report["warnings"]:
        click.echo(f"{warning} (warning)", err=True)
    if not report["changed"]:
        out_console.print(f"{report['profile']}: nothing changed.", markup=False)
        return
    verb = "applied" if report["applied"] else "not applied (dry run)"
    out_console.print(f"{report['profile']}: {verb}", markup=False)
    for model in report["models"]:
        out_console.print(f"  {model['note']}", markup=False)
    if report.get("keys_changed"):
        out_console.print("  the API keys changed: they apply from the next request", markup=False)
    for setting in report["restart_only"]:
        out_console.print(f"  {setting} changed: applies only when the server restarts", markup=False)
