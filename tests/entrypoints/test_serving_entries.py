"""``turnout serve``, ``demo``, ``status`` and ``switch`` as a user runs them: the console script from another
folder, a fresh home, no leftover variables (``conftest.py``), each held by a real answer of the server.

``serve`` gets a server of its own (one engine: ``--no-preload``). ``demo`` serves the demo as a newcomer starts
it: it keeps its admin token in a private file and prints only that file's path; ``status`` and ``switch`` then
drive that server as the same user, who finds the token there, or with the file exported as the demo says (its
second model is preloaded, so the switch starts no engine).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.live_server import demo_copy
from tests.entrypoints.conftest import Started, User
from tests.ports import free_port

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

#: How long a server may take to answer /ready: its tiny engines start in 15-25 s, far longer on a busy machine.
READY_S = 300.0
HI = [{"role": "user", "content": "Hi"}]
_EXPORT = re.compile(r"export (TURNOUT_ADMIN_TOKEN_FILE)=(\S+)")


def _chat(url: str, model: str, headers: dict[str, str] | None = None) -> str:
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": HI, "temperature": 0, "max_tokens": 16},
        headers=headers,
        timeout=120,
    )
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def _stops_clean(started: Started) -> None:
    """SIGTERM, as systemd or Docker sends it: the server shuts down in order and exits by the signal (uvicorn
    raises it again once shut down) or with 0."""
    code = started.stop(signal.SIGTERM)
    assert code in (0, -signal.SIGTERM), started.log()[-4000:]
    assert "Application shutdown complete." in started.log()


def test_serve_answers_a_chat(user: User, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    profile = demo_copy(tiny_models, tmp_path / "project")
    port = free_port()
    key = {"TURNOUT_ENTRY_KEY": "entry-key"}
    args = ["serve", str(profile), "--port", str(port), "--no-preload", "--api-key-env", "TURNOUT_ENTRY_KEY"]
    started = user.start(*args, log=tmp_path / "serve.log", env=key)
    url = f"http://127.0.0.1:{port}"
    try:
        started.wait_ready(f"{url}/ready", READY_S)
        assert httpx.post(f"{url}/v1/chat/completions", json={"model": "tools"}, timeout=30).status_code == 401
        assert _chat(url, "tools", {"Authorization": "Bearer entry-key"}) == "Hello from tiny-tools."
        _stops_clean(started)
    finally:
        started.kill()


@pytest.fixture(scope="module")
def demo(module_user: User, tiny_models: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """``turnout demo`` on a free port: its URL and the path of the admin token's file it printed.

    ``TURNOUT_TINY_MODELS`` names the session's built models, so the demo finds them built (a newcomer's first
    run builds them there: the same command, 20 s more).
    """
    port = free_port()
    folder = next(iter(tiny_models.values())).parent
    models = {"TURNOUT_TINY_MODELS": str(folder)}
    log = module_user.cwd / "demo.log"
    started: Started = module_user.start("demo", "--port", str(port), log=log, env=models)
    url = f"http://127.0.0.1:{port}"
    try:
        started.wait_ready(f"{url}/ready", READY_S)
        exported = _EXPORT.search(started.log())
        assert exported is not None, started.log()[-4000:]
        yield url, exported.group(2)
        _stops_clean(started)
    finally:
        started.kill()


def test_demo_serves_both_models(demo: tuple[str, str]) -> None:
    url, _ = demo
    listed = httpx.get(f"{url}/v1/models", timeout=30)
    assert listed.status_code == 200, listed.text
    assert sorted(card["id"] for card in listed.json()["data"]) == ["plain", "tools"]
    assert _chat(url, "tools") == "Hello from tiny-tools."


def test_status_shows_the_demos_active_model(demo: tuple[str, str], module_user: User) -> None:
    url, token_file = demo
    token = Path(token_file).read_text().strip()
    assert token and token not in (module_user.cwd / "demo.log").read_text()  # only its path was printed
    refused = module_user.run("status", "--url", url, env={"XDG_STATE_HOME": str(module_user.cwd / "elsewhere")})
    assert refused.returncode == 1 and "no generated token is in the state folder" in refused.stderr, refused.stderr
    shown = module_user.run("status", "--url", url)  # the same user: the token's file in the state folder
    assert shown.returncode == 0, shown.stderr
    assert "active: tools" in shown.stdout, shown.stdout


def test_switch_moves_the_demo_to_the_other_model(demo: tuple[str, str], module_user: User) -> None:
    url, token_file = demo
    admin = {"TURNOUT_ADMIN_TOKEN_FILE": token_file}
    switched = module_user.run("switch", "plain", "--url", url, env=admin, timeout=300)
    assert switched.returncode == 0, switched.stderr
    assert switched.stdout.startswith("switched tools -> plain in "), switched.stdout
    assert "active: plain" in module_user.run("status", "--url", url, env=admin).stdout
    assert _chat(url, "plain") == "Hello from tiny-plain."
