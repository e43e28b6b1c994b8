"""``turnout demo``: build the tiny demo models (cached), then serve ``profiles/demo.yaml``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from server.cli._output import out_console
from server.cli.serve import ServeOptions, load_serving_profile, run_server

__all__ = ["demo"]

DEMO_PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "demo.yaml"


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind.")
def demo(host: str, port: int) -> None:
    """Build the tiny demo models on first use, then serve the demo profile with a fresh admin token."""
    from server.tinymodels import build_tiny_models

    with out_console.status("Building the tiny demo models (first run only)…"):
        paths = build_tiny_models()
    for name, path in paths.items():
        out_console.print(f"[green]✓[/] {name}: {path}")
    options: dict[str, Any] = {"host": host, "port": port, "generate_admin_token": True}
    run_server(load_serving_profile(str(DEMO_PROFILE)), ServeOptions(**options))
