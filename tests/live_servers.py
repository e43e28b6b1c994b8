"""The test session's live ``turnout serve`` processes: one at a time, each shared by the tests that need it.

A test asks :class:`LiveServers` for a server by key (through the session fixture ``live_servers``); the first
request starts it and the tests that follow share it, in its module and the next ones. Asking for another key
stops the one running first, and ``tests/conftest.py`` stops it when the next test's module does not use
``live_servers``, so a shared server lives no longer than a module fixture would and never runs beside a later
module's engines (each server holds one or two engines of a 2-core machine).

So that each key starts once per session whatever the modules are called, a test (or module) that shares a
server says which with ``@pytest.mark.live_server(key)``, and ``tests/conftest.py`` moves the tests of each key
together (:func:`grouped_by_server`).

Tests that change a server's state beyond the active model (a reload, a kill) start their own server instead.

The suite runs on two pytest-xdist workers (pyproject's ``-n 2 --dist loadscope``, with ``tests/conftest.py``'s
scheduler): the modules that run real engines form one lane (:func:`lane`), which one worker runs first and in
the order above, as a one-worker run did, so live servers still start one at a time; the other modules (fakes,
in-process apps, the CLI, property tests, and the few engine modules named as able to run beside the lane) each
go to whichever worker is free. The second of the machine's two cores, idle while the lane waited on an engine,
runs them. The xdist controller collects nothing, so a module's lane is read from its source
(:func:`marks_engines`); each worker checks that against the markers it collected.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TypeVar

from tests.api.live_server import LiveServer

__all__ = ["ENGINE_LANE", "LiveServers", "grouped_by_server", "lane", "marks_engines"]

T = TypeVar("T")

#: The xdist scope of the modules that run real engines one after another.
ENGINE_LANE = "engines"
_ENGINE_MARK = re.compile(r"\bpytest\.mark\.engine\b")


class LiveServers:
    """Starts a server on demand; starting another one stops the one before."""

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._current: tuple[str, LiveServer] | None = None
        self.starts: list[str] = []  # every key started, in order (what the session paid for)

    def get(self, key: str, start: Callable[[Path], LiveServer]) -> LiveServer:
        """The server for ``key``: the running one, or ``start(folder)`` (a started and ready server)."""
        if self._current is not None and self._current[0] == key:
            return self._current[1]
        self.close()
        folder = self._workdir / key
        folder.mkdir(exist_ok=True)
        server = start(folder)
        self._current = (key, server)
        self.starts.append(key)
        return server

    def close(self) -> None:
        """Stop the running server, if any."""
        if self._current is not None:
            current, self._current = self._current[1], None
            current.stop()


def grouped_by_server(items: Sequence[T], key: Callable[[T], str | None]) -> list[T]:
    """``items`` with the ones of each server ``key`` moved together, to where the first of them is.

    Items without a key stay in their order, and so do the items of one key (a module's order is kept).
    """
    groups: dict[str, list[T]] = {}
    for item in items:
        if (name := key(item)) is not None:
            groups.setdefault(name, []).append(item)
    ordered: list[T] = []
    for item in items:
        name = key(item)
        if name is None:
            ordered.append(item)
        elif groups[name][0] is item:
            ordered.extend(groups[name])
    return ordered


def marks_engines(source: str) -> bool:
    """Whether a test module's source marks tests ``engine`` (``pytestmark = pytest.mark.engine`` or a
    decorator)."""
    return _ENGINE_MARK.search(source) is not None


def lane(module: str, runs_engines: bool, beside: Collection[str]) -> str:
    """The xdist scope of a test ``module``: :data:`ENGINE_LANE` for a module that ``runs_engines`` unless it is
    one of those that may run ``beside`` the lane; otherwise the module itself (its tests stay together, so its
    module fixtures start once)."""
    return ENGINE_LANE if runs_engines and module not in beside else module
