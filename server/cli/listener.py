"""The server's TCP socket, bound before any engine loads."""

from __future__ import annotations

import socket


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port``, for uvicorn to listen on once the app has started.

    Bound before the default model loads, as vLLM's own server binds before its engine starts: a taken address
    fails at once rather than after a model load that is then thrown away, and no other program's connection or
    ``bind(0)`` can be handed the port while the engine starts (clients are refused until the server listens).

    Raises:
        OSError: the address cannot be bound (taken, not this host's, a privileged port).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's own: a restart meets TIME_WAIT
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock
