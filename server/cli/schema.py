"""``turnout schema``: print the profile file's JSON Schema, for editors and other tools.

It comes from the same msgspec Structs that validate profiles (``server/profiles/json_schema.py``). With the
schema saved as ``profile.schema.json``, a profile's first line
``# yaml-language-server: $schema=profile.schema.json`` gives editors that speak the YAML language server
completion, hover text and checks.
"""

from __future__ import annotations

import json

import click

from server.profiles import profile_json_schema

__all__ = ["schema"]


@click.command()
@click.option("--indent", default=2, show_default=True, type=click.IntRange(min=0), help="Spaces per JSON level.")
def schema(indent: int) -> None:
    """Print the JSON Schema of a profile file (YAML or JSON) to stdout.

    \b
    Save it and name it on a profile's first line for editor completion and checks:
      turnout schema > profile.schema.json
      # yaml-language-server: $schema=profile.schema.json
    """
    click.echo(json.dumps(profile_json_schema(), indent=indent or None))
