"""The real app, manager and reloader over a real profile file on fake engines (the reload tests' server)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from server.api import ApiSettings, create_app
from server.api.edge.key_ring import KeyRing, read_keys
from server.api.reload.reloader import Reloader
from server.engine import EngineManager, MemoryPlan
from server.engine.strategies import KeepStrategy
from server.profiles import Profile, ValidationResult, validate_profile
from tests.api.conftest import ADMIN_TOKEN, admin
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader
from tests.fakes.parsers import FakeParserRegistry
from tests.fakes.profile_files import isolated_env, make_workspace

__all__ = ["Served", "serve_profile"]


@dataclass
class Served:
    client: httpx.AsyncClient
    manager: EngineManager[Any]
    reloader: Reloader
    profile: Path
    workspace: Path

    def write(self, text: str) -> None:
        self.profile.write_text(text)

    async def reload(self, **body: Any) -> httpx.Response:
        return await self.client.post("/admin/reload", json=body, headers=admin())

    async def close(self) -> None:
        await self.client.aclose()
        await self.manager.shutdown()


class _FakeSource:
    """The server's stack source as a reload calls it: the fake parser registry, the workspace's environment, and
    nothing to prepare (the plan stays the manager's)."""

    def __init__(self, env: Mapping[str, str], manager: EngineManager[Any]) -> None:
        self._env, self._manager = env, manager

    def load(self, path: str | None = None, data: bytes | None = None) -> ValidationResult:
        return validate_profile(path, env=self._env, parsers=FakeParserRegistry(), data=data)

    def prepare(self, profile: Profile) -> tuple[Profile, MemoryPlan | None]:
        return profile, self._manager.memory_plan


async def serve_profile(tmp_path: Path, text: str, env: Mapping[str, str] | None = None) -> Served:
    """Serve ``text`` as ``profile.yaml`` in a workspace under ``tmp_path``, its keys read from ``env`` as
    ``turnout serve`` reads them (and again on each reload). Close it with :meth:`Served.close`."""
    workspace = make_workspace(tmp_path)
    profile_path = workspace / "profile.yaml"
    profile_path.write_text(text)
    all_env = {**isolated_env(workspace), **(env or {})}

    profile = validate_profile(str(profile_path), env=all_env, parsers=FakeParserRegistry()).profile
    assert profile is not None
    manager: EngineManager[Any] = EngineManager(
        profile.models, KeepStrategy(FakeLoader()), build_fake_serving_bundle, abort_grace=0.1, memory_probe=lambda: 1.0
    )
    await manager.initialize(profile.default_model)
    keys = read_keys(profile, all_env)
    ring = KeyRing(keys)
    reloader = Reloader(manager, profile, _FakeSource(all_env, manager), key_ring=ring, env=all_env)
    settings = ApiSettings(
        admin_token=ADMIN_TOKEN,
        api_key=keys.api_key,
        scoped_keys=keys.scoped,
        api_key_cache_group=keys.api_key_cache_group,
    )
    app = create_app(manager, settings, reloader=reloader, key_ring=ring)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turnout.test")
    return Served(client, manager, reloader, profile_path, workspace)
