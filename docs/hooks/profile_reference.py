"""MkDocs hook: the profile reference page and the profile's JSON Schema, generated at build time.

Both come from the msgspec Structs that validate profiles (``server.profiles.field_reference`` and
``profile_json_schema``), so the reference never drifts from what ``turnout validate`` accepts. Nothing is written
into ``docs/``: the files exist only in the build.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

__all__ = ["REFERENCE_URI", "SCHEMA_URI", "on_files", "render_reference"]

REFERENCE_URI = "reference/profile.md"
SCHEMA_URI = "reference/profile.schema.json"
_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:  # `mkdocs build` from a checkout that is not installed
    sys.path.insert(0, str(_REPO))

from server.profiles import field_reference, profile_json_schema  # noqa: E402


def render_reference() -> str:
    """The reference page's markdown: one section per part of the file, one entry per key."""
    lines = [
        "# Profile reference",
        "",
        "Generated from the profile's types (`server/profiles/schema.py`) when the site is built: every key a",
        "profile file may hold, with its type and bounds, its default and an example. `turnout schema` prints the",
        "same types as a JSON Schema, published here as [`profile.schema.json`](profile.schema.json); see",
        "[Profiles](../profiles.md#editor-completion) for the editor line that uses it.",
        "",
        "A model's keys that are not listed here go to vLLM's `AsyncEngineArgs` unchanged (`max_model_len`,",
        "`dtype`, ...); `turnout validate` checks them against vLLM's own declarations. Top-level keys that start",
        "with `x-` are ignored (a place for YAML anchors).",
        "",
    ]
    for section in field_reference():
        lines += [f"## `{section.where}`", "", section.summary, ""]
        for field in section.fields:
            default = "**required**" if field.required else f"default `{field.default}`"
            lines += [
                f"### `{section.where}.{field.name}`" if section.where != "(top level)" else f"### `{field.name}`",
                "",
                f"Type: `{field.type}` · {default}",
                "",
                field.description,
                "",
                "```yaml",
                field.example,
                "```",
                "",
            ]
    return "\n".join(lines)


def on_files(files: Files, config: Any) -> Files:
    """Add the generated reference page and schema to the build."""
    files.append(File.generated(config, REFERENCE_URI, content=render_reference()))
    files.append(File.generated(config, SCHEMA_URI, content=json.dumps(profile_json_schema(), indent=2) + "\n"))
    return files
