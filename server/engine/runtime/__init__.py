"""The engine layer's runtime room: how an engine's processes come to be.

On CPU an engine core is forked from a warm launcher (a process of Turnout's that imported vLLM and torch once),
not spawned: a start reaches its first token in seconds instead of half a minute (#40). ``launcher_main.py`` is the
launcher process, ``launcher.py`` Turnout's handle on it, ``process.py`` the process object vLLM keeps for a forked
core, ``context.py`` the one hook into vLLM (imported by the loader only: it imports vLLM). ``framing.py`` is the
wire format between them. ``compile_cache.py`` gives each engine's processes their private compile cache.
"""

from server.engine.runtime.compile_cache import COMPILE_CACHE_ENV, compile_cache_env
from server.engine.runtime.launcher import (
    LAUNCHER_ENV,
    EngineLauncher,
    LauncherUnavailable,
    engine_launcher,
    launcher_enabled,
    running_launcher_pid,
    stop_engine_launcher,
)
from server.engine.runtime.process import LaunchedProcess

__all__ = [
    "COMPILE_CACHE_ENV",
    "LAUNCHER_ENV",
    "EngineLauncher",
    "LaunchedProcess",
    "LauncherUnavailable",
    "compile_cache_env",
    "engine_launcher",
    "launcher_enabled",
    "running_launcher_pid",
    "stop_engine_launcher",
]
