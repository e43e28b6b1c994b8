"""``turnout demo``: build the tiny demo models (cached), then serve ``profiles/demo.yaml``.

The models are built where ``$TURNOUT_TINY_MODELS`` says (default ``.cache/tiny-models``). The demo profile names
the default folder; when the models are elsewhere, the demo serves a copy of the profile, written next to them,
whose paths point at them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from server.cli._output import out_console
from server.cli.logging_setup import LOG_FORMAT_OPTION, set_up_logging
from server.cli.profile_checks import load_serving_profile
from server.cli.serve_options import ServeOptions
from server.cli.uvicorn_server import run_server
from server.profiles import LogFormat

__all__ = ["DEMO_PROFILE", "demo", "demo_profile"]

DEMO_PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "demo.yaml"
#: Model keys whose relative paths resolve against the profile's folder, and so must be absolute in a copy.
_PATH_KEYS = ("chat_template", "quant_config")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind.")
@LOG_FORMAT_OPTION
def demo(host: str, port: int, log_format: LogFormat) -> None:
    """Build the tiny demo models on first use, then serve the demo profile with a fresh admin token.

    The models go to $TURNOUT_TINY_MODELS when it is set (default: .cache/tiny-models in the checkout).
    """
    from server.tinymodels import build_tiny_models

    setup = set_up_logging(log_format, "info")  # before the models' build imports vLLM

    with out_console.status("Building the tiny demo models (first run only)…"):
        paths = build_tiny_models()
    for name, path in paths.items():
        out_console.print(f"[green]✓[/] {name}: {path}")
    profile = demo_profile(paths)
    if profile != DEMO_PROFILE:
        out_console.print(f"Serving a copy of {DEMO_PROFILE.name} with these models: {profile}", markup=False)
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "generate_admin_token": True,
        "log_format": log_format,
        "logging_setup": setup,
    }
    from server.api import StackSource

    serve_options = ServeOptions(**options)
    run_server(load_serving_profile(StackSource(serve_options.source(str(profile)))), serve_options)


def demo_profile(models: dict[str, Path], source: Path = DEMO_PROFILE) -> Path:
    """The demo profile that serves ``models`` (model name to folder): ``source`` itself when its model paths
    name these folders, else a copy next to the models with every path absolute (comments and anchors kept)."""
    yaml = YAML(typ="rt")
    tree = yaml.load(source.read_text())
    entries: CommentedMap = tree["models"]
    changed = False
    for entry in entries.values():
        folder = models.get(Path(entry["model"]).name)
        if folder is None or (source.parent / entry["model"]).resolve() == folder.resolve():
            continue
        entry["model"] = str(folder)
        for key in _PATH_KEYS:
            if key in entry:
                entry[key] = str((source.parent / entry[key]).resolve())
        changed = True
    if not changed:
        return source
    copy = next(iter(models.values())).parent / source.name
    with copy.open("w") as out:
        yaml.dump(tree, out)
    return copy
