"""What a real engine reads from places another local user can write, on real tiny vLLM engines, forked by the
engine launcher and spawned: its ZMQ ``ipc://`` sockets sit in a private folder of its own (not in ``/tmp``
itself), removed when it stops and with the server; and a ``turnout serve`` started in a folder with a planted
``torch.py`` and ``multiprocessing.py`` answers a chat while no process of its engines imports them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import httpx
import psutil
import pytest

from server.engine.runtime import LAUNCHER_ENV
from server.engine.runtime.rpc_folder import RPC_BASE_ENV
from server.engine.runtime.vllm_loader import VllmEngineLoader
from server.engine.supervision.watch import engine_pids
from server.profiles.schema import ModelProfile
from tests.api.live_server import LiveServer, demo_copy, wait_ready
from tests.engine.engine_args import TINY_ENGINE_ARGS
from tests.ports import free_port

pytestmark = pytest.mark.engine

START = {"forked": "1", "spawned": "0"}  # TURNOUT_ENGINE_LAUNCHER for each way an engine core comes to be


def _socket_files(pids: Iterable[int]) -> set[Path]:
    """The unix socket files the processes of ``pids`` and their children have bound (vLLM's ipc:// sockets)."""
    found: set[Path] = set()
    for pid in pids:
        try:
            root = psutil.Process(pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in processes:
            try:
                connections = process.net_connections(kind="unix")
            except psutil.Error:
                continue
            found.update(Path(c.laddr) for c in connections if isinstance(c.laddr, str) and c.laddr.startswith("/"))
    return found


def _assert_in_private_folders(sockets: set[Path]) -> set[Path]:
    """Every socket is in a folder of this user's with mode 0700, not in the temporary folder itself; the folders."""
    assert sockets, "no ipc socket found"
    folders = {socket.parent for socket in sockets}
    for folder in folders:
        st = os.lstat(folder)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid(), folder
        assert stat.S_IMODE(st.st_mode) == 0o700, (folder, oct(st.st_mode))
        assert folder != Path(tempfile.gettempdir()), f"a socket in {folder} itself (mode 1777)"
    return folders


@pytest.mark.parametrize("start", START)
async def test_an_engines_sockets_sit_in_a_private_folder_of_its_own_removed_at_its_stop(
    start: str, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LAUNCHER_ENV, START[start])
    model = ModelProfile(model=str(tiny_models["tiny-plain"]), engine_args=TINY_ENGINE_ARGS)
    loader = VllmEngineLoader()
    engine = await loader.load("plain", model)
    try:
        assert RPC_BASE_ENV not in os.environ  # set around the start only
        sockets = _socket_files([os.getpid(), *engine_pids(engine)])
        ours = {socket for socket in sockets if socket.name.count("-") == 4}  # vLLM names them by a uuid4
        folders = _assert_in_private_folders(ours)
        assert len(folders) == 1, folders
    finally:
        await loader.unload(engine)
    (folder,) = folders
    assert not folder.exists(), f"{folder} outlived its engine"


#: Planted in the folder `turnout serve` starts in: writes down the process that imported it, then steps aside for
#: the real module (so that an engine that imports it still starts, and the test sees every import, not the first).
PLANTED = """
import importlib, os, sys
with open({marker!r}, "a") as _f:
    _f.write(f"{{__name__}} {{os.getpid()}} {{sys.argv!r}}\\n")
_here = os.path.dirname(os.path.abspath(__file__))
del sys.modules[__name__]
_path = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
try:
    sys.modules[__name__] = importlib.import_module(__name__)
finally:
    sys.path[:] = _path
"""


@pytest.mark.parametrize("start", START)
def test_turnout_serve_started_in_a_planted_folder_answers_and_its_engines_never_import_from_it(
    start: str, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """The user's path: the console script, started in a folder of someone else's making (a download, a shared
    checkout), no $PYTHONPATH. The engine's sockets are checked as above, and its server's folder of them is gone
    after the server's exit."""
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    marker = tmp_path / "planted-imports"
    for module in ("torch", "multiprocessing"):  # what the launcher, a spawned core and its worker import first
        (workdir / f"{module}.py").write_text(PLANTED.format(marker=str(marker)))
    profile = demo_copy(tiny_models, tmp_path / "site")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env[LAUNCHER_ENV] = START[start]
    port = free_port()
    command = [str(Path(sys.executable).parent / "turnout"), "serve", str(profile), "--port", str(port)]
    log_path = tmp_path / "serve.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [*command, "--no-preload"], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    live = LiveServer(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path, log_file=log)
    try:
        wait_ready(live, timeout=600)
        chat = {"model": "tools", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}
        answer = httpx.post(f"{live.url}/v1/chat/completions", json=chat, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]
        folders = _assert_in_private_folders(
            {socket for socket in _socket_files([process.pid]) if socket.name.count("-") == 4}
        )
        roots = {folder.parent for folder in folders}
    finally:
        live.stop()
    imports = marker.read_text() if marker.exists() else ""
    assert imports == "", f"planted modules were imported:\n{imports}\n{live.log()[-3000:]}"
    deadline = time.monotonic() + 10
    while any(root.exists() for root in roots) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(root.exists() for root in roots), f"{roots} outlived the server"
