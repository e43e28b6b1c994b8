"""Turnout's secrets leave the process environment once read, so that no process it starts inherits them.

vLLM starts each engine's core process with multiprocessing's ``spawn``, which hands the child a copy of
``os.environ`` as it is at that moment, and the core starts its workers the same way; so does every other child
(a kernel compiler, Ray's workers). A secret left in ``os.environ`` is therefore in every engine process's
``/proc/<pid>/environ``, and in whatever those processes run or dump. So, once the server has read them, the
variables that hold its secrets are moved out of ``os.environ`` into this module's private mapping: the profile's
``server.admin_token_env``, ``server.api_key_env``, ``server.metrics_token_env``, each
``server.api_keys[*].key_env``, vLLM's ``VLLM_API_KEY``, and the variable ``--api-key-env`` names.

Everything that reads a secret reads :func:`secret_env` (the withheld values, then ``os.environ``), so a reload
that reads the keys again still finds them: a running process's environment never changes from outside, so the
values kept are exactly what ``os.environ`` would have held. A reload that names a new key variable withholds it
too (an engine started before that reload inherited it; one started after does not).

Why once, rather than around each spawn: Turnout does not make every spawn itself (vLLM's core spawns its
workers, vLLM-Gaudi's host its core), and changing ``os.environ`` around a spawn races the threads that read it.
Moved out before the first engine starts, no later child of this process can get them.
"""

from __future__ import annotations

import os
from collections import ChainMap
from collections.abc import Iterable, Mapping
from typing import Final

from server.api.key_ring import VLLM_API_KEY_ENV
from server.profiles import Profile

__all__ = ["secret_env", "secret_names", "withhold_secrets"]

#: The secrets moved out of ``os.environ``, by variable name (this process only; never inherited).
_withheld: Final[dict[str, str]] = {}


def secret_env() -> Mapping[str, str]:
    """The environment to read secrets from: the withheld variables, then ``os.environ`` (live)."""
    return ChainMap(_withheld, os.environ)


def secret_names(profile: Profile, extra: Iterable[str | None] = ()) -> frozenset[str]:
    """The variables that hold ``profile``'s secrets, vLLM's ``VLLM_API_KEY`` and the ``extra`` names given."""
    server = profile.server
    names = {server.admin_token_env, server.api_key_env, VLLM_API_KEY_ENV, *(item.key_env for item in server.api_keys)}
    names.update(name for name in (server.metrics_token_env, *extra) if name)
    return frozenset(names)


def withhold_secrets(profile: Profile, extra: Iterable[str | None] = ()) -> frozenset[str]:
    """Move the variables :func:`secret_names` lists out of ``os.environ`` (read them with :func:`secret_env`).

    Returns:
        The names that were in ``os.environ`` and are now withheld.
    """
    moved = set()
    for name in secret_names(profile, extra):
        value = os.environ.pop(name, None)
        if value is not None:
            _withheld[name] = value
            moved.add(name)
    return frozenset(moved)
