"""The runtime: vLLM's engines, their configs, flags and processes. The engine layer imports vLLM only here.

``vllm_loader.py`` builds vLLM ``AsyncLLM`` engines (and vLLM-Gaudi's stash host) from model profiles;
``vllm_configs.py`` every model's engine config, built before any engine starts; ``vllm_flags.py`` vLLM's engine flags
on ``turnout serve``'s command line; ``model_tasks.py`` what each model can serve; ``start_phases.py`` every second
of an engine start; ``start_process.py`` whether a start's core is forked or spawned; ``host.py`` the host's
device and room for another engine; ``stash_config.py`` and ``stash_serialization.py`` what vLLM-Gaudi's stash
host needs; ``in_place_swap.py`` drives an in-place model swap through the engine core's utilities (which run
inside vLLM's processes: ``server/vllm_plugin``) and ``frontend_state.py`` refreshes ``AsyncLLM``'s own model state
after one.

On CPU an engine core is forked from a warm launcher (a process of Turnout's that imported vLLM and torch once),
not spawned: a start reaches its first token in seconds instead of half a minute. ``launcher_main.py`` is the
launcher process, ``launcher.py`` Turnout's handle on it, ``process.py`` the process object vLLM keeps for a forked
core, ``context.py`` the one hook into vLLM (imported by the loader only: it imports vLLM). ``framing.py`` is the
wire format between them. ``compile_cache.py`` gives each engine's processes their private compile cache.
``state_folder.py`` is the server's private state folder, and ``fingerprints.py`` the models' probe fingerprints
kept there (with the checkpoints' content digests). ``faults.py`` holds the faults a drill arms
(``--inject-fault``).
"""

from __future__ import annotations

from server.engine.runtime.compile_cache import COMPILE_CACHE_ENV, compile_cache_env
from server.engine.runtime.faults import FAULT_KINDS, FAULTS, FaultKind, InjectedFaults, parse_fault
from server.engine.runtime.fingerprints import (
    Fingerprint,
    FingerprintStore,
    content_digests,
    digest_cache_file,
    fingerprint_key,
    model_dtype,
)
from server.engine.runtime.frontend_state import RendererFactory
from server.engine.runtime.host import detect_device, memory_check
from server.engine.runtime.in_place_swap import InPlaceSwap, LoadOutcome, PluginMissing
from server.engine.runtime.launcher import (
    LAUNCHER_ENV,
    EngineLauncher,
    LauncherUnavailable,
    engine_launcher,
    launcher_enabled,
    running_launcher_pid,
    stop_engine_launcher,
)
from server.engine.runtime.model_tasks import ModelTasks, TaskReader, generation_tasks
from server.engine.runtime.process import LaunchedProcess
from server.engine.runtime.start_phases import ENGINE_STARTS
from server.engine.runtime.start_process import spawn_only, spawned_starts
from server.engine.runtime.state_folder import StateDir, state_dir, state_home
from server.engine.runtime.vllm_configs import (
    EngineConfigInvalid,
    build_engine_configs,
    model_shape,
    read_device_memory,
)
from server.engine.runtime.vllm_flags import EngineFlagsInvalid, parse_engine_flags
from server.engine.runtime.vllm_loader import VllmEngineLoader, stash_host_factory

__all__ = [
    "COMPILE_CACHE_ENV",
    "ENGINE_STARTS",
    "FAULTS",
    "FAULT_KINDS",
    "LAUNCHER_ENV",
    "EngineConfigInvalid",
    "EngineFlagsInvalid",
    "EngineLauncher",
    "FaultKind",
    "Fingerprint",
    "FingerprintStore",
    "InPlaceSwap",
    "InjectedFaults",
    "LaunchedProcess",
    "LauncherUnavailable",
    "LoadOutcome",
    "ModelTasks",
    "PluginMissing",
    "RendererFactory",
    "StateDir",
    "TaskReader",
    "VllmEngineLoader",
    "build_engine_configs",
    "compile_cache_env",
    "content_digests",
    "detect_device",
    "digest_cache_file",
    "engine_launcher",
    "fingerprint_key",
    "generation_tasks",
    "launcher_enabled",
    "memory_check",
    "model_dtype",
    "model_shape",
    "parse_engine_flags",
    "parse_fault",
    "read_device_memory",
    "running_launcher_pid",
    "spawn_only",
    "spawned_starts",
    "stash_host_factory",
    "state_dir",
    "state_home",
    "stop_engine_launcher",
]
