"""``scripts/module_times.py``, which ``.ci/run`` runs on the suite's JUnit XML, sums each module's tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]

#: Two modules: the slow one's time is in its module fixture (set-up of its first test, teardown of its last).
SLOW = """
import time
import pytest

@pytest.fixture(scope="module")
def server():
    time.sleep(0.6)
    yield
    time.sleep(0.6)

class TestGroup:
    def test_one(self, server):
        pass

def test_two(server):
    time.sleep(0.3)
"""
FAST = "def test_quick():\n    pass\n"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_times", REPO / "scripts" / "module_times.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_times_sums_setup_call_and_teardown_per_file_and_lists_the_slowest(tmp_path: Path) -> None:
    package = tmp_path / "tests" / "api"
    package.mkdir(parents=True)
    (package / "test_slow.py").write_text(SLOW)
    (package / "test_fast.py").write_text(FAST)
    xml = tmp_path / "results.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", "tests"]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr

    totals = _script().module_times(xml)
    assert set(totals) == {"tests/api/test_slow.py", "tests/api/test_fast.py"}, xml.read_text()
    assert 1.5 <= totals["tests/api/test_slow.py"] < 60  # both fixture sleeps and the call's (a generous ceiling)
    assert totals["tests/api/test_fast.py"] < totals["tests/api/test_slow.py"]

    shown = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "module_times.py"), str(xml), "--top", "1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(shown) == 2 and shown[1].endswith("s  tests/api/test_slow.py"), shown
