"""The import path of an engine's processes: what Turnout's installation put there, never the working directory.

``python -m`` puts the folder a process starts in first on its ``sys.path``, ``python -c`` an empty entry (the same
folder); a ``torch.py`` (or ``multiprocessing.py``) in the folder ``turnout serve`` was started from would then be
imported by the engine instead of the real module, with the engine's rights. Every process of an engine therefore:

* starts with ``PYTHONSAFEPATH=1`` (:data:`SAFE_PATH_ENV`, set around each start, so also every Python its
  processes start: the worker, multiprocessing's helpers, torch's compile workers), and the engine launcher with
  ``-P``: its interpreter prepends nothing;
* gets :func:`engine_sys_path` where Turnout hands its own path on: the launcher's ``PYTHONPATH``, and the path
  ``multiprocessing`` sends a spawned process (:func:`spawns_with_engine_path`; it would send this process's
  ``sys.path``, with an empty entry turned into the working directory).

:func:`engine_sys_path` is this process's ``sys.path`` without empty or relative entries and without the working
directory, unless ``$PYTHONPATH`` names it by an absolute path (an operator's explicit choice, as a source checkout
without an install needs: ``pip install -e .`` needs none). Turnout's own package is found through its installation
(its ``.pth`` finder in site-packages), wherever the server was started.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import multiprocessing.spawn
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["SAFE_PATH_ENV", "engine_sys_path", "spawns_with_engine_path"]

#: What every process of an engine starts with: Python prepends neither its folder nor the working directory.
SAFE_PATH_ENV: Mapping[str, str] = {"PYTHONSAFEPATH": "1"}


def engine_sys_path() -> list[str]:
    """This process's ``sys.path`` as an engine may have it (see the module's docstring)."""
    # Only an absolute entry is a choice of a folder: an empty or relative one means wherever the process is.
    named = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    explicit = {os.path.realpath(entry) for entry in named if os.path.isabs(entry)}
    origin: str | None = getattr(multiprocessing.process, "ORIGINAL_DIR", None)  # where it turns an empty entry
    here = {os.path.realpath(folder) for folder in (os.getcwd(), origin) if folder}
    kept: list[str] = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):
            continue  # resolved against whatever folder a process is in when it imports
        real = os.path.realpath(entry)
        if real in here and real not in explicit:
            continue
        kept.append(entry)
    return kept


@contextlib.contextmanager
def spawns_with_engine_path() -> Iterator[None]:
    """Processes ``multiprocessing`` spawns inside get :func:`engine_sys_path`, not this process's ``sys.path``.

    ``multiprocessing.spawn.get_preparation_data`` (called by name for each spawn) is wrapped for the duration: the
    loader's lock keeps it one start's at a time.
    """
    original = multiprocessing.spawn.get_preparation_data

    def preparation_data(name: str) -> dict[str, Any]:
        data: dict[str, Any] = original(name)
        if "sys_path" in data:
            data["sys_path"] = engine_sys_path()
        return data

    multiprocessing.spawn.get_preparation_data = preparation_data
    try:
        yield
    finally:
        multiprocessing.spawn.get_preparation_data = original
