"""Undoing, after a test, what a server's start-up run in the test's process did to the environment.

A server moves its key variables out of ``os.environ`` into a process-wide store once it has read them
(``server/api/edge/withheld_env.py``). In a test process that store outlives the test: :func:`secrets_put_back` forgets
what the test withheld and puts back into ``os.environ`` what was there before the test.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from server.api.edge import withheld_env

__all__ = ["secrets_put_back"]


@contextlib.contextmanager
def secrets_put_back() -> Iterator[None]:
    """For the block: whatever it withholds is forgotten after it, and ``os.environ`` holds its earlier values."""
    store = withheld_env._withheld
    before_store = dict(store)
    before_env = dict(os.environ)
    try:
        yield
    finally:
        for name in set(store) - set(before_store):
            del store[name]
            if name in before_env:
                os.environ[name] = before_env[name]
