"""The session's shared live servers: one start per key while the tests that need it follow one another."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tests.api.live_server import LiveServer
from tests.live_servers import LiveServers


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
