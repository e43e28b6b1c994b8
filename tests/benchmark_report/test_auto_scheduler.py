"""The scheduler simulation's ``--json`` report is typed, and its defaults are stated once."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from benchmarks import auto_scheduler
from server.profiles.schema import Switching


def test_the_json_report_decodes_into_its_struct_with_the_command_line_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "simulation.json"

    assert auto_scheduler.main(["--requests", "60", "--traffic", "closed", "--cost", "stop=2", "--json", str(out)]) == 0

    report = msgspec.json.decode(out.read_bytes(), type=auto_scheduler.Report)
    assert report.workload == msgspec.structs.replace(auto_scheduler.Workload(), requests=60)
    assert report.costs == {**auto_scheduler.COSTS, "stop": 2.0}
    defaults = Switching()
    assert (report.switching.max_wait_s, report.switching.max_queue) == (defaults.max_wait_s, defaults.max_queue)
    # Every strategy x {2, 3} models x {FIFO, scheduler} on the one traffic, each run asked for all 60 requests.
    assert len(report.results) == 2 * len(report.comparisons) == 2 * 2 * len(auto_scheduler.COSTS)
    assert {result.requests for result in report.results} == {60}
    assert "fewer switches" in capsys.readouterr().out
