"""Benchmark output names paths relative to the repository: a result file or the benchmarks page is read on other
machines, where this checkout's folder means nothing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from benchmarks import docs_page
from benchmarks.profile_frontend import top_functions
from benchmarks.servers import repo_relative, served_model
from server.tinymodels.spec import REPO_ROOT

#: An absolute path into a checkout or a scratch folder of some machine.
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|home|Users|tmp|root)/[\w.+-]+")


def _tracked(*patterns: str) -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", *patterns], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO_ROOT / name for name in names]


def test_the_scan_sees_a_machine_path() -> None:
    assert MACHINE_PATH.findall("--model /srv/x /tmp/checkout/.cache/tiny-models/tiny-tools") == ["/tmp/checkout"]
    assert MACHINE_PATH.findall("--model .cache/tiny-models/tiny-tools, ~/.cache/turnout") == []


def test_no_committed_result_or_page_names_a_machine_path() -> None:
    files = _tracked("docs/benchmarks.md", "benchmarks/results/*.json", "benchmarks/*.py")
    assert len(files) > 5
    found = [
        f"{path.relative_to(REPO_ROOT)}: {match}"
        for path in files
        for match in MACHINE_PATH.findall(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_a_recorded_command_runs_from_the_repository_and_names_no_folder_of_it() -> None:
    model = served_model()
    command = repo_relative("python -m vllm.entrypoints.openai.api_server " + " ".join(model.vllm_arguments()))
    assert str(REPO_ROOT) in " ".join(model.vllm_arguments()), "the servers themselves get absolute paths"
    assert str(REPO_ROOT) not in command
    model_path = command.split("--model ", 1)[1].split(" ", 1)[0]
    assert REPO_ROOT / model_path == Path(model.model.model), "the servers run in the repository's folder"


def test_the_page_names_no_folder_of_this_checkout() -> None:
    assert str(REPO_ROOT) not in docs_page.render()


def test_a_profile_frame_is_shortened_to_its_place_in_the_repository(tmp_path: Path) -> None:
    collapsed = tmp_path / "raw.txt"
    frames = f"main ({REPO_ROOT}/server/api/app.py:10);handle (/usr/lib/site-packages/litestar/app.py:5)"
    collapsed.write_text(f"{frames} 3\n")
    table = top_functions(collapsed)
    assert "server/api/app.py:10" in table
    assert str(REPO_ROOT) not in table
    assert "litestar/app.py:5" in table and "/usr/lib" not in table
