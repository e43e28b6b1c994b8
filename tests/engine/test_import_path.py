"""An engine's processes import nothing from the folder Turnout was started in: not the launcher (``python -m``
would put that folder first on its path), not the cores it forks, not a core ``multiprocessing`` spawns (it would
hand on Turnout's ``sys.path``, an empty entry turned into that folder). Plain targets here; the user's path, a
``turnout serve`` started in a folder with a planted ``torch.py``, is ``test_engine_isolation.py``'s."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from server.engine.runtime import EngineLauncher, LaunchedProcess
from server.engine.runtime.import_path import engine_sys_path, spawns_with_engine_path

#: A module only the planted folder has: importing it runs the planted code (it writes down where it ran).
PLANTED = "turnout_planted_probe"


def _plant(folder: Path) -> Path:
    marker = folder / "planted-ran"
    (folder / f"{PLANTED}.py").write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\n")
    return marker


def try_the_planted_module(path: str) -> None:
    """An engine's stand-in: tries the planted module, writes down its ``sys.path`` and whether the import worked."""
    try:
        __import__(PLANTED)
        imported = True
    except ImportError:
        imported = False
    Path(path).write_text(json.dumps({"imported": imported, "sys_path": sys.path}))


def test_the_engine_path_has_no_working_directory_unless_pythonpath_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = str(tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", str(tmp_path), ".", "relative/dir", installed])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert engine_sys_path() == [installed]
    monkeypatch.setenv("PYTHONPATH", f"::.:{tmp_path}")  # empty and relative entries are no choice of a folder
    assert engine_sys_path() == [str(tmp_path), installed]


def test_a_launcher_started_in_a_planted_folder_never_imports_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its children are forked from it: its path is theirs. Before: ``python -m`` put the folder first."""
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    marker = _plant(workdir)
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))  # as `python -m server.cli` started there has it
    launcher = EngineLauncher(preload=())
    launcher.start()
    try:
        assert launcher.wait_ready(60), launcher.state
        child = LaunchedProcess(launcher, {}, try_the_planted_module, "Probe", (str(tmp_path / "seen"),))
        child.start()
        child.join(30)
    finally:
        launcher.stop()
    seen = json.loads((tmp_path / "seen").read_text())
    assert not seen["imported"] and not marker.exists()
    assert "" not in seen["sys_path"] and str(workdir) not in seen["sys_path"]


def test_a_spawned_engine_process_never_imports_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What vLLM does for a core the launcher does not fork (``get_mp_context()``: spawn on CPU)."""
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    marker = _plant(workdir)
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend("")  # as `python -c` or a REPL has it; multiprocessing turns it into the folder
    monkeypatch.syspath_prepend(str(workdir))
    monkeypatch.setenv("PYTHONSAFEPATH", "1")  # the start's variable: the child's own `-c` start prepends nothing
    with spawns_with_engine_path():
        child = multiprocessing.get_context("spawn").Process(
            target=try_the_planted_module, args=(str(tmp_path / "seen"),)
        )
        child.start()
    child.join(60)
    assert child.exitcode == 0
    seen = json.loads((tmp_path / "seen").read_text())
    assert not seen["imported"] and not marker.exists()
    assert "" not in seen["sys_path"] and str(workdir) not in seen["sys_path"]
    assert os.getcwd() == str(workdir)  # this test's own folder is left to monkeypatch to restore
