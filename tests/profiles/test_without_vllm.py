"""The profiles layer needs no vLLM: its tests pass, in a subprocess, with every ``vllm`` import refused.

That is the machine ``turnout validate`` may run on (a laptop checking a profile for a Gaudi server). The tests
that read the installed vLLM's source skip themselves there; every other one must pass as it does here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GUARD = "TURNOUT_TESTING_WITHOUT_VLLM"

#: Runs pytest with a finder in front of every other that refuses ``vllm`` and its submodules, as when it is not
#: installed (``importlib.util.find_spec("vllm")`` raises, ``import vllm`` fails).
WITHOUT_VLLM = """
import sys

class RefuseVllm:
    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ModuleNotFoundError(f"No module named {name!r} (refused by the test)", name=name)
        return None

sys.meta_path.insert(0, RefuseVllm())
import pytest

sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.skipif(os.environ.get(GUARD) == "1", reason="this test is what runs the others without vLLM")
def test_the_profiles_tests_pass_without_vllm() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_VLLM, str(HERE), "-q", "-p", "no:cacheprovider", "-rs", "-n", "0"],
        cwd=REPO,
        env={**os.environ, GUARD: "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # The run really lacked vLLM: the tests that read its source skipped.
    assert "reads the installed vLLM's source" in done.stdout, done.stdout[-2000:]
    assert " passed" in done.stdout
