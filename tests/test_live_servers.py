"""The session's shared live servers: one start per key while the tests that need it follow one another."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tests.api.live_server import LiveServer
from tests.live_servers import ENGINE_LANE, LiveServers, grouped_by_server, lane, marks_engines


class _Server:
    """Stands in for a started server: records its folder and whether it was stopped."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.stopped = folder, 0

    def stop(self) -> None:
        self.stopped += 1


def _start(folder: Path) -> LiveServer:
    return cast(LiveServer, _Server(folder))


def test_each_key_starts_once_and_another_key_stops_the_one_before(tmp_path: Path) -> None:
    servers = LiveServers(tmp_path)
    demo = servers.get("demo", _start)
    assert servers.get("demo", _start) is demo and servers.starts == ["demo"]
    assert cast(Any, demo).folder == tmp_path / "demo" and (tmp_path / "demo").is_dir()
    other = servers.get("reliability-keep", _start)
    assert other is not demo and cast(Any, demo).stopped == 1
    servers.close()
    servers.close()  # nothing left to stop
    assert cast(Any, other).stopped == 1
    assert servers.get("demo", _start) is not demo and servers.starts == ["demo", "reliability-keep", "demo"]


def test_the_tests_of_each_server_move_together_to_where_the_first_one_is() -> None:
    # (name, server key): a fast module ("classify") sat between two modules of the "keep" server, which stopped
    # the server after the first and started it again for the second.
    items = [
        ("bad_clients::a", "keep"),
        ("broken::keep", "keep"),
        ("broken::stop", "stop"),
        ("classify::x", None),
        ("classify::y", None),
        ("fuzz::keep", "keep"),
        ("traffic::stop", "stop"),
        ("traffic::auto", "auto"),
    ]
    ordered = grouped_by_server(items, key=lambda item: item[1])
    assert [name for name, _ in ordered] == [
        "bad_clients::a",
        "broken::keep",
        "fuzz::keep",
        "broken::stop",
        "traffic::stop",
        "classify::x",
        "classify::y",
        "traffic::auto",
    ]
    assert grouped_by_server(items, key=lambda item: None) == items  # nothing shared: nothing moves


def test_the_engine_modules_share_one_lane_and_the_others_keep_their_module() -> None:
    beside = {"tests/frontend/test_bundle_a.py"}
    assert lane("tests/api/test_live_server.py", True, beside) == ENGINE_LANE
    assert lane("tests/engine/test_x.py", True, beside) == ENGINE_LANE
    assert lane("tests/frontend/test_bundle_a.py", True, beside) == "tests/frontend/test_bundle_a.py"
    assert lane("tests/profiles/test_y.py", False, beside) == "tests/profiles/test_y.py"


def test_an_engine_module_reads_as_one_from_its_source() -> None:
    assert marks_engines("import pytest\n\npytestmark = pytest.mark.engine\n")
    assert marks_engines("@pytest.mark.engine\ndef test_x() -> None: ...\n")
    assert not marks_engines("import pytest\n\npytestmark = pytest.mark.engineer\n")
    assert not marks_engines("def test_x() -> None: ...\n")
