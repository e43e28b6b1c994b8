"""The natural profile compiled, for ``just bench``: ``tests/api/test_natural_profile.py`` with its models exactly
as a user first writes them (``model`` and ``max_model_len`` only, so torch.compile is on).

    .venv/bin/python -m benchmarks.natural_profile

The suite runs the same test with ``enforce_eager`` added (the quick case); a compiled first start takes about
a minute longer on a 2-core machine, so it runs here. The step passes when the test does.
"""

from __future__ import annotations

import os
import subprocess
import sys

from server.tinymodels.spec import REPO_ROOT

__all__ = ["MODE_ENV", "TEST", "main"]

MODE_ENV = "TURNOUT_NATURAL_PROFILE"
TEST = "tests/api/test_natural_profile.py"


def main() -> int:
    """Run the compiled test; returns pytest's exit code."""
    env = {**os.environ, MODE_ENV: "compiled"}
    command = [sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider", "-rfE", "--durations=3"]
    return subprocess.run(command, cwd=REPO_ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
