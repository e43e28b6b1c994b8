"""``turnout demo`` serves the tiny models where ``$TURNOUT_TINY_MODELS`` put them, not only in the checkout's
``.cache/tiny-models`` that ``profiles/demo.yaml`` names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from server.cli import demo as demo_module
from server.cli.main import main
from server.profiles import validate_profile
from server.tinymodels import TINY_PLAIN, TINY_TOOLS
from tests.fakes.parsers import FakeParserRegistry


def _moved(tiny_models: dict[str, Path], folder: Path) -> dict[str, Path]:
    """The built models, as if $TURNOUT_TINY_MODELS had put them in ``folder``."""
    for name, path in tiny_models.items():
        shutil.copytree(path, folder / name)
    return {name: folder / name for name in tiny_models}


def test_the_demo_serves_the_models_where_the_env_var_put_them(
    tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved = _moved(tiny_models, tmp_path / "elsewhere")
    served: list[str] = []
    monkeypatch.setenv("TURNOUT_TINY_MODELS", str(tmp_path / "elsewhere"))
    monkeypatch.setattr("server.tinymodels.build_tiny_models", lambda: moved)
    monkeypatch.setattr(demo_module, "load_serving_profile", lambda source: served.append(source.options.path))
    monkeypatch.setattr(demo_module, "run_server", lambda profile, options: None)
    # Not this process's logging, nor a vLLM logging file in its environment for the engines of later tests.
    monkeypatch.setattr(demo_module, "set_up_logging", lambda log_format, level: None)

    result = CliRunner().invoke(main, ["demo"])

    assert result.exit_code == 0, result.output
    [path] = served
    assert Path(path) == tmp_path / "elsewhere" / "demo.yaml"
    validated = validate_profile(path, parsers=FakeParserRegistry())
    assert validated.errors == []
    assert validated.profile is not None
    models = validated.profile.models
    assert (models["tools"].model, models["plain"].model) == (str(moved["tiny-tools"]), str(moved["tiny-plain"]))
    assert models["tools"].chat_template == str(TINY_TOOLS.template_path)
    assert models["plain"].chat_template == str(TINY_PLAIN.template_path)
    assert validated.profile.switching.strategy == "keep" and models["plain"].preload  # the rest is the demo's


def test_the_demo_serves_the_shipped_profile_where_it_names_the_models(tiny_models: dict[str, Path]) -> None:
    if {path.resolve() for path in tiny_models.values()} != {
        (demo_module.DEMO_PROFILE.parent / "../.cache/tiny-models" / name).resolve() for name in tiny_models
    }:
        pytest.skip("$TURNOUT_TINY_MODELS moved this run's models away from the demo profile's paths")
    assert demo_module.demo_profile(tiny_models) == demo_module.DEMO_PROFILE
