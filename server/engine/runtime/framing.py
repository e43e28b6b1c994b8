"""The launcher's wire format: length-prefixed pickles over a Unix socket pair, one message a frame.

Turnout to launcher: ``("launch", target, args, kwargs, env, name)`` (what vLLM gave ``Process(...)``, the child's
whole environment and its process name). Launcher to Turnout: ``("ready",)`` or ``("unfit", reason)`` once, then
``("started", pid)`` or ``("failed", reason)`` for each launch, in order, and ``("exit", pid, exitcode)`` whenever
a child ends (``exitcode`` as ``multiprocessing`` gives it: negative for a signal).

Pickle is safe here: both ends are Turnout's own processes, joined by a socket pair nobody else holds.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

__all__ = ["read_frame", "write_frame"]

_HEADER = struct.Struct("!I")


def write_frame(sock: socket.socket, message: Any) -> None:
    """Send ``message`` as one frame (blocks until it is all written)."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(body)) + body)


def read_frame(sock: socket.socket) -> Any:
    """The next message; raises :class:`EOFError` when the other end has closed."""
    (size,) = _HEADER.unpack(_read_exactly(sock, _HEADER.size))
    return pickle.loads(_read_exactly(sock, size))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError("the other end closed the launcher socket")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
