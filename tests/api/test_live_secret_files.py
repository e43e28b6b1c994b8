"""A server given its secrets as files (``VAR_FILE``) holds none of them in the environment of any of its processes
(the server, the engine launcher, the engines), and still checks every one of them."""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil
import pytest

from tests.api.live_server import demo_copy, serving

pytestmark = pytest.mark.engine

SECRETS = {
    "T48_ADMIN": "admin-secret-t48",
    "T48_KEY": "api-key-secret-t48",
    "T48_METRICS": "metrics-secret-t48",
    "T48_TEAM": "team-secret-t48",
}
SERVER = (
    "server:\n  admin_token_env: T48_ADMIN\n  api_key_env: T48_KEY\n  metrics_token_env: T48_METRICS\n"
    "  api_keys:\n    - {key_env: T48_TEAM, models: [plain]}\n"
)


def _environ(process: psutil.Process) -> bytes:
    return Path(f"/proc/{process.pid}/environ").read_bytes()


def test_no_process_of_the_server_holds_a_secret_given_as_a_file(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    profile = demo_copy(tiny_models, tmp_path, lambda text: text + SERVER)
    env = {}
    for name, value in SECRETS.items():
        path = tmp_path / name.lower()
        path.write_text(value + "\n")
        path.chmod(0o600)
        env[f"{name}_FILE"] = str(path)
    with serving(profile, tmp_path / "serve.log", env) as live:
        admin = {"Authorization": f"Bearer {SECRETS['T48_ADMIN']}"}
        assert httpx.get(f"{live.url}/admin/status", headers=admin, timeout=30).status_code == 200
        assert httpx.get(f"{live.url}/admin/status", timeout=30).status_code in (401, 403)
        assert httpx.get(f"{live.url}/v1/models", timeout=30).status_code == 401
        for key in ("T48_KEY", "T48_TEAM"):
            answer = httpx.get(f"{live.url}/v1/models", headers={"Authorization": f"Bearer {SECRETS[key]}"})
            assert answer.status_code == 200, key
        metrics = {"Authorization": f"Bearer {SECRETS['T48_METRICS']}"}
        assert httpx.get(f"{live.url}/metrics", headers=metrics, timeout=30).status_code == 200

        server = psutil.Process(live.process.pid)
        processes = [server, *server.children(recursive=True)]
        assert len(processes) > 1  # the engine launcher and the default model's engine at least
        for process in processes:
            environ = _environ(process)
            assert not [name for name, value in SECRETS.items() if value.encode() in environ], process.cmdline()
        assert b"T48_ADMIN_FILE=" in _environ(server)  # the scan reads real environments: the path is there
