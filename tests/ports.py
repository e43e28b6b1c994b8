"""Ports for the servers the suite starts, which bind them later (a subprocess, Ray Serve's proxy).

A port from ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, the one every outgoing connection
and every other ``bind(0)`` (vLLM's engine ports, Ray's) also draws from: a server that binds it seconds later may
find it taken (a clean-clone CI run lost a module's server so, ``address already in use``). These come from below
that range, in a band of their own for each xdist worker, each handed out once per run.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

__all__ = ["free_port"]

#: Above Ray's worker ports (10002-19999 by default).
_LOWEST = 20000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _band() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    width = (max(_ephemeral_start(), _LOWEST + 2000) - _LOWEST) // count
    return range(_LOWEST + index * width, _LOWEST + (index + 1) * width)


_BAND = _band()
_START = random.randrange(len(_BAND))  # another run on the machine most likely starts elsewhere in it
_given: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will bind it
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port of this worker's band that is free now and was not handed out before in this run."""
    for step in range(len(_BAND)):
        port = _BAND[(_START + step) % len(_BAND)]
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port left in {_BAND}")
