"""Session fixtures shared by every test package."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from server.tinymodels import build_tiny_models
from tests.live_servers import ENGINE_LANE, LiveServers, grouped_by_server, lane, marks_engines
from tests.reliability.conftest import ServerPool, broken_copy
from tests.vllm_reference import VllmReference

__all__ = [
    "SET_ON_PURPOSE",
    "leaves_no_trace",
    "live_servers",
    "reliability_models",
    "server_pool",
    "tiny_models",
    "vllm_reference",
]

_LIVE_SERVERS = pytest.StashKey[LiveServers]()
_SHARING = pytest.StashKey[set[str]]()
_WORKER_STARTS = pytest.StashKey[list[str]]()

#: Engine modules that may run beside the engine lane (tests/live_servers.py): in-process engines, and modules
#: that start their own server (no shared one), whose checks have no timing bound a second busy core could break.
#: The Ray cluster too: its node's start-up once outlasted Ray's fixed 30 s wait beside the lane, so its fixture
#: tries a second start (tests/cluster/test_ray_serve.py); in the lane it made the lane the run's critical path.
#: Not the lifecycle module (drain timing) nor the departures one (stall timeouts).
BESIDE_THE_LANE = frozenset(
    {
        "tests/cluster/test_ray_serve.py",
        # The entry points as a user starts them: servers and a Ray cluster of their own, minutes-long bounds.
        "tests/entrypoints/test_ray_serve_entry.py",
        "tests/entrypoints/test_serving_entries.py",
        "tests/api/test_live_frontend_flags.py",
        "tests/api/test_live_speech.py",
        "tests/api/test_live_trust.py",
        "tests/api/test_natural_profile.py",
        # Its own two servers, one after the other; byte comparisons, no timing bound.
        "tests/api/test_vllm_differential.py",
        "tests/frontend/test_bundle_classify.py",
        "tests/frontend/test_bundle_embeddings.py",
        "tests/frontend/test_bundle_generate.py",
        "tests/frontend/test_bundle_lora.py",
        "tests/frontend/test_bundle_speech.py",
        "tests/tinymodels/test_engine.py",
        "tests/engine/test_in_place_engines.py",
        "tests/engine/test_kv_keep_engines.py",
        "tests/engine/test_kv_drill.py",
        "tests/engine/test_real_engines.py",
        "tests/engine/test_residency_by_memory_engines.py",
    }
)

# The test run's engines float over both cores. vLLM's CPU worker otherwise binds its threads to core 0 (the
# other core is left to the API server): two engines of the two xdist workers at once would share that core while
# the other idles. Serving outside the tests keeps vLLM's binding.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

# An engine's import path never holds the working directory unless $PYTHONPATH names it
# (server/engine/runtime/import_path.py): the run names the checkout, whose tests/ holds the targets the launcher
# tests have engines run (a user's engines need nothing but the installed package).
_CHECKOUT = str(Path(__file__).resolve().parents[1])
if _CHECKOUT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_CHECKOUT, os.environ.get("PYTHONPATH")]))

# Property tests and the randomized concurrency test draw this many cases each: few in the suite (CI runs it),
# ten times as many with `pytest --hypothesis-profile thorough`.
settings.register_profile("suite", max_examples=40)
settings.register_profile("thorough", max_examples=400)
settings.load_profile("suite")


#: Variables set in the test process on purpose, which a test may leave changed (each with its reason); any other
#: change to ``os.environ`` fails the test that made it (:func:`leaves_no_trace`).
SET_ON_PURPOSE = frozenset(
    {
        # pytest's own: the test being run, updated at every phase.
        "PYTEST_CURRENT_TEST",
        # vLLM's, on its first import in the process (vllm/env_override.py), for every process it starts after.
        "LD_LIBRARY_PATH",  # its CUDA compatibility libraries first, where it finds them
        "PYTORCH_NVML_BASED_CUDA_CHECK",  # torch asks NVML whether CUDA is there, without initializing CUDA
        "TORCHINDUCTOR_COMPILE_THREADS",  # one inductor compile thread (also its CPU platform's)
        "TRITON_CACHE_AUTOTUNING",  # Triton's autotuning results cached on disk
        "TILELANG_CLEANUP_TEMP_FILES",  # TileLang's temporary folders per process, not one shared by all users
        "AITER_SITUV2_A8W4",  # its ROCm AITER kernels' activation, synced on import (vllm/_aiter_ops.py)
        "AITER_SITUV2_A4W4",
        # Ray's, on its first import in the process (ray/_private/client_mode_hook.py): no Ray Client mode.
        "RAY_CLIENT_MODE",
        # vLLM's CPU platform, whenever an engine config is made in the process (vllm/platforms/cpu.py), for the
        # engine processes it starts: spawned workers, thread counts, its allocator and OpenMP preloads.
        "VLLM_WORKER_MULTIPROC_METHOD",
        "NUMEXPR_MAX_THREADS",
        "VLLM_DISABLE_SHARED_EXPERTS_STREAM",
        "TORCHINDUCTOR_CPP_DYNAMIC_THREADS",
        "LD_PRELOAD",
        "LOCAL_WORLD_SIZE",
        "VLLM_SSM_CONV_STATE_LAYOUT",
    }
)


@pytest.fixture(autouse=True)
def leaves_no_trace() -> Iterator[None]:
    """Fail a test that leaves ``os.environ`` (but :data:`SET_ON_PURPOSE`) or the working directory changed.

    A test that needs a variable or another folder uses ``monkeypatch``, which puts them back: a leftover once made
    the tests after it pass where a user's fresh shell fails (a ``RAY_AUTH_MODE`` hid a ``turnout ray-serve`` that
    could not start), or fail for a reason of another test.
    """
    environ, cwd = dict(os.environ), os.getcwd()
    yield
    after = dict(os.environ)
    changed = sorted(
        name
        for name in environ.keys() | after.keys()
        if environ.get(name) != after.get(name) and name not in SET_ON_PURPOSE
    )
    now = os.getcwd()
    moved = now != cwd
    if moved:
        os.chdir(cwd)  # the next tests run where they expect to
    for name in changed:  # and with the environment they expect
        if name in environ:
            os.environ[name] = environ[name]
        else:
            os.environ.pop(name, None)
    if changed or moved:
        what = [f"os.environ: {', '.join(changed)}"] if changed else []
        what += [f"working directory: {cwd} -> {now}"] if moved else []
        pytest.fail(f"the test left {'; '.join(what)} changed (use monkeypatch)", pytrace=False)


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    """``{"tiny-tools": folder, "tiny-plain": folder}``, built into ``.cache/tiny-models`` (or
    ``$TURNOUT_TINY_MODELS``).

    The first run on a machine builds them (about 20 s); later runs find them cached in well under a second.
    """
    return build_tiny_models()


@pytest.fixture(scope="session")
def vllm_reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> VllmReference:
    """A fresh vLLM server's greedy answers, one server start per checkpoint per session
    (``tests/vllm_reference.py``), shared by the session's xdist workers (in their temporary folders' parent)."""
    run = tmp_path_factory.getbasetemp()
    return VllmReference((run.parent if hasattr(request.config, "workerinput") else run) / "vllm-reference")


@pytest.fixture(scope="session")
def live_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServers]:
    """The session's shared live servers (``tests/live_servers.py``)."""
    servers = LiveServers(tmp_path_factory.mktemp("live-servers"))
    request.config.stash[_LIVE_SERVERS] = servers
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture(scope="session")
def reliability_models(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two demo models and a broken copy of tiny-plain: the models of the reliability profiles."""
    broken = broken_copy(tiny_models["tiny-plain"], tmp_path_factory.mktemp("broken-model"))
    return {"tools": tiny_models["tiny-tools"], "plain": tiny_models["tiny-plain"], "broken": broken}


@pytest.fixture(scope="session")
def server_pool(reliability_models: dict[str, Path], live_servers: LiveServers) -> ServerPool:
    """The servers of the reliability profiles (``tests/reliability/conftest.py``), on the session's live servers;
    ``tests/api/test_live_server.py`` shares their ``auto`` one."""
    return ServerPool(reliability_models, live_servers)


#: The environment variable of torch's inductor cache, where every engine's worker keeps the kernels it compiled.
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
_INDUCTOR_CACHE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "live_server(key): the shared live server a test runs against (tests/live_servers.py)"
    )
    # Each test process's engines (in-process, its servers', its Ray replicas') get an inductor cache of their own,
    # new for the run. torch's default is one folder per user, shared by every process: an engine killed
    # mid-compile (by a false hang verdict, since fixed; a load timeout or a test's kill can do it too) left an empty
    # kernel library there, which broke every later engine of the run that used that kernel (torch loads a cached
    # library as it is), and would have broken the next runs on the machine too.
    distributing = not hasattr(config, "workerinput") and config.getoption("numprocesses", None) not in (None, 0)
    if INDUCTOR_CACHE_ENV not in os.environ and not distributing:  # xdist's workers would inherit the controller's
        folder = Path(tempfile.mkdtemp(prefix="turnout-tests-inductor-"))
        config.stash[_INDUCTOR_CACHE] = folder
        os.environ[INDUCTOR_CACHE_ENV] = str(folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_INDUCTOR_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests of each shared live server together, so that each one starts once per session; on an
    xdist worker, the engine lane first (``tests/live_servers.py``), after checking that every module with an
    ``engine`` test reads as one from its source (the controller's scheduler reads the sources)."""
    items[:] = grouped_by_server(items, _server_key)
    if hasattr(config, "workerinput"):
        marked = {_module(item) for item in items if item.get_closest_marker("engine") is not None}
        unread = {module for module in marked if not _reads_as_engine_module(config.rootpath, module)}
        if unread:
            raise pytest.UsageError(f"engine tests whose module's source does not say pytest.mark.engine: {unread}")
        items.sort(key=lambda item: _lane(config.rootpath, _module(item)) != ENGINE_LANE)  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` schedules the lanes of ``tests/live_servers.py``: one scope per lane."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _lane(config.rootpath, nodeid.split("::", 1)[0])

    return LaneScheduling(config, log)


@functools.cache
def _reads_as_engine_module(root: Path, module: str) -> bool:
    return marks_engines((root / module).read_text())


def _lane(root: Path, module: str) -> str:
    return lane(module, _reads_as_engine_module(root, module), BESIDE_THE_LANE)


def _server_key(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("live_server")
    return None if marker is None else str(marker.args[0])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its shared servers' starts to the controller (``pytest_testnodedown``)."""
    servers = session.config.stash.get(_LIVE_SERVERS, None)
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and servers is not None:
        workeroutput["live_server_starts"] = servers.starts


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller collects each worker's starts (pytest-xdist's hook; unused without xdist)."""
    starts = getattr(node, "workeroutput", {}).get("live_server_starts", [])
    node.config.stash.setdefault(_WORKER_STARTS, []).extend(starts)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """What the session paid for its shared live servers: each start, in order."""
    servers = config.stash.get(_LIVE_SERVERS, None)
    starts = [*(servers.starts if servers is not None else []), *config.stash.get(_WORKER_STARTS, [])]
    if servers is not None or _WORKER_STARTS in config.stash:
        started = ", ".join(starts) or "none"
        terminalreporter.write_line(f"shared live servers: {len(starts)} started ({started})")


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the shared live server once the next test's module uses none (as a module fixture's would stop): it
    must not run beside the engines of the modules that follow."""
    servers = item.config.stash.get(_LIVE_SERVERS, None)
    if servers is not None and (nextitem is None or _module(nextitem) not in _sharing_modules(item.session)):
        servers.close()


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _sharing_modules(session: pytest.Session) -> set[str]:
    """The modules with a test that uses ``live_servers`` (read once per session)."""
    if _SHARING not in session.stash:
        session.stash[_SHARING] = {
            _module(item) for item in session.items if "live_servers" in getattr(item, "fixturenames", ())
        }
    return session.stash[_SHARING]
