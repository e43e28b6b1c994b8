"""The docs site builds with ``mkdocs build --strict``; its profile reference, generated from the profile's
Structs, names every key of every section; the README stays a landing page whose commands CI runs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import jsonschema
import msgspec
import pytest
from ruamel.yaml import YAML

from server.profiles import ApiKeyScope, ModelProfile, Profile, ServerSection, Switching, profile_json_schema

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "docs" / "hooks" / "profile_reference.py"
NOT_FILE_KEYS = {"path", "engine_args"}  # set by the loader / a model's other keys (engine arguments)
SECTIONS = {
    Profile: "",
    ModelProfile: "models.NAME.",
    Switching: "switching.",
    ServerSection: "server.",
    ApiKeyScope: "server.api_keys[].",
}
PAGES = (
    *("getting-started", "profiles", "reference/profile", "switching", "residency", "security", "operations"),
    *("deploy", "troubleshooting", "benchmarks", "design", "upgrading", "changelog"),
)
#: One reference entry: its heading, its type with the default (or required), its text, then its example line.
ENTRY = re.compile(
    r"^### `([^`]+)`\n\nType: `[^`]+` · (?:\*\*required\*\*|default `[^`]+`)\n\n.+?\n\n```yaml\n(\w+): ",
    flags=re.MULTILINE | re.DOTALL,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it (about a second)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("profile_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in PAGES:
        assert (site / page / "index.html").is_file(), page


def test_the_reference_names_every_key_of_every_profile_struct(site: Path) -> None:
    markdown = _hook().render_reference()
    html = (site / "reference" / "profile" / "index.html").read_text()
    headings = set(re.findall(r"^### `([^`]+)`$", markdown, flags=re.MULTILINE))
    for struct, prefix in SECTIONS.items():
        for field in msgspec.structs.fields(struct):
            if field.encode_name in NOT_FILE_KEYS:
                continue
            assert f"{prefix}{field.encode_name}" in headings, (struct.__name__, field.encode_name)
            assert f"{prefix}{field.encode_name}" in html
    # Each entry carries its type, default or required, and an example line that names its key.
    entries = ENTRY.findall(markdown)
    assert len(entries) == len(headings)
    assert all(heading.rsplit(".", 1)[-1] == key for heading, key in entries)


def test_the_site_publishes_the_schema_turnout_schema_prints(site: Path) -> None:
    published = json.loads((site / "reference" / "profile.schema.json").read_text())
    assert published == profile_json_schema()


@pytest.mark.parametrize("page", ["README.md", "docs/profiles.md"])
def test_the_profiles_the_docs_show_pass_the_schema(page: str) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / page).read_text(), flags=re.DOTALL)
    profiles = [document for block in blocks if isinstance(document := YAML(typ="safe").load(block), dict)]
    profiles = [document for document in profiles if "models" in document]
    assert profiles
    validator = jsonschema.Draft202012Validator(profile_json_schema())
    for profile in profiles:
        assert [error.message for error in validator.iter_errors(profile)] == []


def test_the_readme_is_a_landing_page_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "bash scripts/setup.sh && .venv/bin/turnout demo\n" in readme
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest\n" in readme  # .ci/run runs exactly this
    assert "\n## Security\n" in readme
    # The README's threat table names only who the full one (docs/security.md, with its tests) names.
    security = (REPO / "docs" / "security.md").read_text()
    who = re.findall(r"^\| (A [^|]*?|An [^|]*?|Another [^|]*?) \|", readme, flags=re.M)
    assert len(who) >= 5
    for row in who:
        assert row.split(" or ")[0].split()[-1] in security, row
    for link in re.findall(r"\]\(((?:docs/)?[\w./-]+\.(?:md|yaml))\)", readme):
        assert (REPO / link).is_file(), link
