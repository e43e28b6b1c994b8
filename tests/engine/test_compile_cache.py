"""The engines' compile cache: every engine start, spawned or forked by the launcher, compiles into a private folder
of Turnout's for its model (not torch's shared ``/tmp/torchinductor_<user>``), and a folder planted where Turnout
keeps it (a link, another user's, open to all) is never used."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from server.engine.runtime import COMPILE_CACHE_ENV, LAUNCHER_ENV, EngineLauncher, vllm_loader
from server.engine.runtime.compile_cache import compile_cache_env, compile_identity, torch_default_cache
from server.engine.runtime.vllm_loader import VllmEngineLoader
from server.profiles.schema import ModelProfile
from server.vllm_plugin import COMPILE_HEADERS_ENV
from tests.fakes.local_user import NOBODY

LLAMA = ModelProfile(model="/m/llama", engine_args={"dtype": "float32"})
QWEN = ModelProfile(model="/m/qwen")


@pytest.fixture(autouse=True)
def cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This user's cache home, here; no compile cache chosen by the environment."""
    home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    return home


def _assert_private(folder: Path) -> None:
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700, folder


async def _started_with(monkeypatch: pytest.MonkeyPatch, *models: ModelProfile) -> list[str | None]:
    """The compile cache each of ``models``' engine starts saw (vLLM's start faked: no engine)."""
    from vllm.v1.engine.async_llm import AsyncLLM

    seen: list[str | None] = []

    def fake_from_engine_args(args: Any, **kwargs: Any) -> str:
        seen.append(os.environ.get(COMPILE_CACHE_ENV))
        return f"engine:{args.model}"

    monkeypatch.setenv(LAUNCHER_ENV, "0")
    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(fake_from_engine_args))
    for index, model in enumerate(models):
        await VllmEngineLoader().load(f"m{index}", model)
    return seen


async def test_each_engine_compiles_into_a_private_folder_of_its_model_that_outlives_it(
    monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    seen = await _started_with(monkeypatch, LLAMA, QWEN, LLAMA)
    root = cache_home / "turnout" / "compile"
    assert seen == [str(root / compile_identity(LLAMA)), str(root / compile_identity(QWEN)), seen[0]]
    assert compile_identity(LLAMA) != compile_identity(QWEN)
    for folder in (cache_home / "turnout", root, root / compile_identity(LLAMA), root / compile_identity(QWEN)):
        _assert_private(folder)
    headers = compile_cache_env(QWEN)[COMPILE_HEADERS_ENV]
    assert headers == str(root / "headers")  # torch's precompiled headers: one folder for every model, private
    _assert_private(root / "headers")
    # Around the start only (importing vLLM here may have set torch's default: torch's own doing).
    assert os.environ.get(COMPILE_CACHE_ENV) in (None, torch_default_cache())


async def test_an_operators_cache_folder_is_kept_and_torchs_shared_default_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache_home: Path
) -> None:
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "mine"))
    assert await _started_with(monkeypatch, LLAMA) == [str(tmp_path / "mine")]
    _assert_private(tmp_path / "mine")  # made by Turnout, as torch would not: mode 0700
    # torch's precompiled headers ignore the variable (they would go to /tmp/torchinductor_<user>): still private.
    headers = compile_cache_env(LLAMA)[COMPILE_HEADERS_ENV]
    assert headers == str(cache_home / "turnout" / "compile" / "headers")
    _assert_private(Path(headers))
    # torch writes its default into the environment of a process that used its cache: not an operator's choice.
    monkeypatch.setenv(COMPILE_CACHE_ENV, torch_default_cache())
    assert await _started_with(monkeypatch, LLAMA) == [
        str(cache_home / "turnout" / "compile" / compile_identity(LLAMA))
    ]
    assert os.environ[COMPILE_CACHE_ENV] == torch_default_cache()


def test_the_turnout_cache_folder_its_scripts_share_may_be_readable_by_others(cache_home: Path) -> None:
    """``~/.cache/turnout`` also holds the scripts' caches (mode 0755 here): only nobody else may write it."""
    (cache_home / "turnout").mkdir(parents=True, mode=0o755)
    (cache_home / "turnout").chmod(0o755)
    used = compile_cache_env(LLAMA)[COMPILE_CACHE_ENV]
    assert used == str(cache_home / "turnout" / "compile" / compile_identity(LLAMA))
    _assert_private(Path(used).parent)


def _plant(kind: str, at: Path, tmp_path: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link":
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        at.symlink_to(target)
    elif kind == "open":
        at.mkdir()
        at.chmod(0o777)  # anyone may put code in it
    else:
        if os.geteuid() != 0:
            pytest.skip("a folder of another user's is made by root")
        at.mkdir(mode=0o700)
        os.chown(at, NOBODY, NOBODY)


@pytest.mark.parametrize("kind", ["link", "open", "another user's"])
@pytest.mark.parametrize("level", ["turnout", "compile", "model"])
def test_a_planted_folder_is_never_used(
    kind: str, level: str, tmp_path: Path, cache_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = cache_home / "turnout" / "compile"
    planted = {"turnout": root.parent, "compile": root, "model": root / compile_identity(LLAMA)}[level]
    if level != "turnout":
        planted.parent.mkdir(parents=True, mode=0o700)
        root.parent.chmod(0o700)
    _plant(kind, planted, tmp_path)
    before = os.lstat(planted)
    used = compile_cache_env(LLAMA)[COMPILE_CACHE_ENV]
    assert not Path(used).is_relative_to(cache_home), used
    assert Path(used).name == compile_identity(LLAMA)
    _assert_private(Path(used).parent)
    _assert_private(Path(used))
    after = os.lstat(planted)
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid), "the planted folder was changed"
    if kind == "link":
        assert not any((tmp_path / "elsewhere").iterdir())
    # Later starts of this process use the same fallback folder (one log line, one folder).
    again = compile_cache_env(LLAMA)
    assert again[COMPILE_CACHE_ENV] == used and again[COMPILE_HEADERS_ENV] == str(Path(used).parent / "headers")
    _assert_private(Path(again[COMPILE_HEADERS_ENV]))


def _operators_folder(kind: str, tmp_path: Path) -> Path:
    """A ``TORCHINDUCTOR_CACHE_DIR`` an operator might name, that another local user could write into or replace."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may rename or replace what is in it
    if kind == "open":
        folder = tmp_path / "mine"
        folder.mkdir()
        folder.chmod(0o777)
    elif kind == "group-writable":
        folder = tmp_path / "mine"
        folder.mkdir()
        folder.chmod(0o770)
    elif kind == "below an open folder":
        folder = shared / "mine"
        folder.mkdir(mode=0o700)
    elif kind == "link into an open folder":
        (shared / "mine").mkdir(mode=0o700)
        folder = tmp_path / "mine"
        folder.symlink_to(shared / "mine")
    else:
        if os.geteuid() != 0:
            pytest.skip("a folder of another user's is made by root")
        folder = tmp_path / "mine"
        folder.mkdir(mode=0o700)
        os.chown(folder, NOBODY, NOBODY)
    return folder


@pytest.mark.parametrize(
    "kind", ["open", "group-writable", "below an open folder", "link into an open folder", "another user's"]
)
def test_an_operators_cache_folder_others_could_write_is_not_used(
    kind: str, tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _operators_folder(kind, tmp_path)
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(folder))
    before = os.lstat(folder)
    env = compile_cache_env(LLAMA)
    root = cache_home / "turnout" / "compile"
    assert env == {COMPILE_CACHE_ENV: str(root / compile_identity(LLAMA)), COMPILE_HEADERS_ENV: str(root / "headers")}
    assert COMPILE_CACHE_ENV in caplog.text and str(folder) in caplog.text  # the operator is told why
    after = os.lstat(folder)
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid), "the operator's folder was changed"


def test_an_operators_cache_folder_reached_through_a_safe_link_is_used_by_its_real_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)  # others may read it, not write it
    real.chmod(0o755)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "link"))
    assert compile_cache_env(LLAMA)[COMPILE_CACHE_ENV] == str(real.resolve())


async def test_the_stash_host_compiles_into_a_private_folder_of_its_models(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache_home: Path
) -> None:
    """vLLM-Gaudi's stash host is one engine core for its models: its start gets the compile cache as any other
    (it got none: torch's shared /tmp default). Fake host only: vllm_gaudi needs Gaudi hardware."""
    from server.engine.runtime.stash_config import MULTI_MODEL_CONFIG_ENV
    from server.engine.runtime.stash_serialization import INSECURE_SERIALIZATION_ENV
    from tests.fakes.stash import FakeStashHost

    for name in (MULTI_MODEL_CONFIG_ENV, INSECURE_SERIALIZATION_ENV):  # absent after it too, whatever the host sets
        monkeypatch.setenv(name, "set-by-the-test")
        monkeypatch.delenv(name)
    seen: list[dict[str, str | None]] = []

    class Host(FakeStashHost):
        async def initialize(self, first: str) -> None:  # where vLLM-Gaudi spawns the engine core
            seen.append({name: os.environ.get(name) for name in (COMPILE_CACHE_ENV, COMPILE_HEADERS_ENV)})
            await super().initialize(first)

    models = {"llama": LLAMA, "qwen": QWEN}
    build = vllm_loader.stash_host_factory(make_host=lambda given: Host(given))
    assert build is not None
    host = await build("llama", models)
    host.shutdown()
    root = cache_home / "turnout" / "compile"
    identity = compile_identity(LLAMA, QWEN)
    assert identity not in (compile_identity(LLAMA), compile_identity(QWEN))
    assert seen == [{COMPILE_CACHE_ENV: str(root / identity), COMPILE_HEADERS_ENV: str(root / "headers")}]
    _assert_private(root / identity)


def _write_cache_env(path: str) -> None:
    """An engine core's stand-in, run in the process the launcher forks: writes down its compile cache."""
    Path(path).write_text(os.environ.get(COMPILE_CACHE_ENV, "unset"))


async def test_an_engine_core_forked_by_the_launcher_gets_its_models_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache_home: Path
) -> None:
    import importlib

    from vllm.v1.engine.async_llm import AsyncLLM

    from server.engine.runtime import LaunchedProcess
    from server.engine.runtime.context import PATCHED

    written = tmp_path / "core-env"

    def fake_from_engine_args(args: Any, **kwargs: Any) -> str:
        core = (
            importlib.import_module(PATCHED[0])
            .get_mp_context()
            .Process(target=_write_cache_env, name="EngineCore", kwargs={"path": str(written)})
        )
        assert isinstance(core, LaunchedProcess)
        core.start()
        core.join(30)
        return "engine"

    launcher = EngineLauncher(preload=())
    launcher.start()
    try:
        assert launcher.wait_ready(60)

        async def ready_launcher(args: Any) -> EngineLauncher:
            return launcher

        monkeypatch.setattr(vllm_loader, "launcher_for", ready_launcher)
        monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(fake_from_engine_args))
        await VllmEngineLoader().load("llama", LLAMA)
    finally:
        launcher.stop()
    assert written.read_text() == str(cache_home / "turnout" / "compile" / compile_identity(LLAMA))
