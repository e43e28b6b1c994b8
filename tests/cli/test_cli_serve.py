"""``turnout serve`` refuses an invalid profile before starting any engine, printing every error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_serve_refuses_an_invalid_profile_with_every_error(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("models:\n  a:\n    model: ./missing\n    max_modle_len: 5\n  b: 3\n")
    result = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", str(profile), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert f"{profile}:3:12: error:" in result.stderr
    assert f"{profile}:4:5: error:" in result.stderr and "max_model_len" in result.stderr
    assert f"{profile}:5:6: error:" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "3 error(s); not starting" in result.stderr
