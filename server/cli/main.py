"""The ``turnout`` command group. Each subcommand lives in its own module; this file only registers them."""

from __future__ import annotations

import click

from server import __version__
from server.cli.client import load, reload, status, switch, unload
from server.cli.demo import demo
from server.cli.ray_serve import ray_serve
from server.cli.schema import schema
from server.cli.serve import serve
from server.cli.simulate import simulate_command
from server.cli.validate import validate

__all__ = ["main"]


@click.group()
@click.version_option(__version__, prog_name="turnout")
def main() -> None:
    """Turnout: one accelerator, many models. An OpenAI-compatible multi-model server."""


for _command in (serve, validate, simulate_command, switch, load, unload, status, reload, demo, ray_serve, schema):
    main.add_command(_command)
