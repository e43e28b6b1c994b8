"""A start's own environment: set around one engine start, and never what a process started between starts sees.

vLLM spawns an engine's core with a copy of ``os.environ``, so each start's variables (the quantization config, the
in-place marker and glibc's malloc settings, the model named in its log lines, the start's event file, its compile
cache) are set around the start and restored after (:func:`spawn_env`); the loader's lock keeps two starts from
seeing each other's. The engine launcher, when it (re)starts during a start, takes :func:`between_starts` instead:
else glibc would read a reconfigure start's malloc settings at its exec and every later fork would keep them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

__all__ = ["between_starts", "spawn_env"]

#: Each variable a start set, with the value it had before (None: unset); empty between starts.
_before_the_start: dict[str, str | None] = {}


def _apply(settings: Mapping[str, str | None]) -> None:
    for name, value in settings.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def spawn_env(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) each variable of ``values`` for the duration, then restore them."""
    saved = {name: os.environ.get(name) for name in values}
    outer = {name: _before_the_start[name] for name in values if name in _before_the_start}
    _before_the_start.update({name: value for name, value in saved.items() if name not in outer})
    _apply(values)
    try:
        yield
    finally:
        _apply(saved)
        for name in values:
            _before_the_start.pop(name, None)
        _before_the_start.update(outer)


def between_starts() -> dict[str, str]:
    """``os.environ`` as it is between engine starts: a start's own variables as they were before it."""
    env = dict(os.environ)
    for name, value in _before_the_start.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
