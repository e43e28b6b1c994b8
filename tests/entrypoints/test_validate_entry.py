"""``turnout validate`` as a user runs it: the console script, another folder, a fresh home, no leftover variables."""

from __future__ import annotations

from pathlib import Path

from tests.api.live_server import demo_copy
from tests.entrypoints.conftest import User


def test_validate_passes_a_good_profile_and_positions_each_error_of_a_bad_one(
    user: User, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    # The demo profile on this machine's tiny models, its templates named relative to its own folder (not here).
    good = demo_copy(tiny_models, tmp_path / "project")
    bad = good.with_name("bad.yaml")
    text = (
        good.read_text().replace("tool_call_parser: hermes", "tool_call_parser: nope").replace("strategy: keep", "x: 1")
    )
    bad.write_text(text)

    passed = user.run("validate", str(good))
    refused = user.run("validate", str(bad))

    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"{good}: model 'tools' (default) -> {tiny_models['tiny-tools']}" in passed.stdout
    assert refused.returncode == 1, refused.stdout + refused.stderr
    errors = [line for line in refused.stdout.splitlines() if ": error: " in line]
    lines = text.splitlines()
    parser = next(i for i, line in enumerate(lines) if "tool_call_parser: nope" in line)
    stray = next(i for i, line in enumerate(lines) if line.strip() == "x: 1")
    # Each error names the file, line and column of the value (or key) at fault: ``file:line:col: error: ...``.
    assert [line.split(": error: ")[0] for line in errors] == [
        f"{bad}:{parser + 1}:{lines[parser].index('nope') + 1}",
        f"{bad}:{stray + 1}:{lines[stray].index('x') + 1}",
    ], refused.stdout
