"""A reload readies the new profile as start-up does: vLLM's engine-config check and the KV-cache budget.

Fake engines and a fake ``prepare`` with the real contract (``prepare_profile``'s result and exceptions).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from server.api.reload.reloader import ProfileRejected, Reloader
from server.engine import EngineManager
from server.engine.residency.kv_budget import plan_kv_cache, with_kv_budget
from server.engine.runtime.vllm_configs import EngineConfigInvalid
from server.engine.strategies import KeepStrategy
from server.engine.types.memory_plan import MemoryPlan, MemoryReading, ModelShape
from server.profiles import Profile, ValidationResult, validate_profile
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader
from tests.fakes.parsers import FakeParserRegistry
from tests.fakes.profile_files import isolated_env, make_workspace

PROFILE = "models:\n  tools:\n    model: models/tiny\n  plain:\n    model: models/tiny\n    max_model_len: 128\n"
MEMORY = MemoryReading(device="cpu", where="NUMA node 0", total_bytes=16 << 30, available_bytes=12 << 30)


def budget(profile: Profile) -> tuple[Profile, MemoryPlan]:
    """What ``prepare_profile`` does, with shapes made up from the profile instead of vLLM's configs."""
    shapes = [
        ModelShape(
            name=name,
            kv_bytes_per_token=512,
            max_model_len=int(model.engine_args.get("max_model_len", 256)),
            max_num_seqs=128,
            block_size=16,
            weight_bytes=1 << 20,
        )
        for name, model in profile.models.items()
    ]
    plan = plan_kv_cache(shapes, MEMORY, resident=2, strategy="keep", engine_overhead_bytes=1 << 30)
    return with_kv_budget(profile, plan), plan


class Server:
    def __init__(self, workspace: Path) -> None:
        self.path = workspace / "profile.yaml"
        self.path.write_text(PROFILE)
        self.env = isolated_env(workspace)
        self.refuse: list[str] = []
        self.prepared = 0

    def load(self, path: str | None = None, data: bytes | None = None) -> ValidationResult:
        return validate_profile(path, env=self.env, parsers=FakeParserRegistry(), data=data)

    def prepare(self, profile: Profile) -> tuple[Profile, MemoryPlan]:
        self.prepared += 1
        if self.refuse:
            raise EngineConfigInvalid(self.refuse)
        return budget(profile)


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[tuple[Server, EngineManager[Any], Reloader]]:
    server = Server(make_workspace(tmp_path))
    loaded = server.load(str(server.path)).profile
    assert loaded is not None
    profile, plan = server.prepare(loaded)
    manager: EngineManager[Any] = EngineManager(
        profile.models,
        KeepStrategy(FakeLoader()),
        build_fake_serving_bundle,
        abort_grace=0.1,
        memory_probe=lambda: 1.0,
        memory_plan=plan,
    )
    await manager.initialize(profile.default_model)
    yield server, manager, Reloader(manager, profile, server)
    await manager.shutdown()


async def test_an_unchanged_file_is_no_change_once_budgeted(
    started: tuple[Server, EngineManager[Any], Reloader],
) -> None:
    server, manager, reloader = started
    report = await reloader.reload()
    assert server.prepared == 2 and report.changed is False
    assert manager.models["tools"].engine_args["kv_cache_memory_bytes"] == 256 * 128 * 512


async def test_a_reloaded_model_gets_its_budget_and_the_status_shows_it(
    started: tuple[Server, EngineManager[Any], Reloader],
) -> None:
    server, manager, reloader = started
    server.path.write_text(PROFILE.replace("max_model_len: 128", "max_model_len: 512"))
    report = await reloader.reload()
    assert report.applied
    (change,) = report.models
    assert change.name == "plain" and sorted(change.engine) == ["kv_cache_memory_bytes", "max_model_len"]
    assert manager.models["plain"].engine_args["kv_cache_memory_bytes"] == 512 * 128 * 512
    plan = manager.snapshot().memory
    assert plan is not None
    assert {d.model: d.kv_cache_bytes for d in plan.decisions}["plain"] == 512 * 128 * 512


async def test_what_vllm_refuses_is_refused_and_nothing_changes(
    started: tuple[Server, EngineManager[Any], Reloader],
) -> None:
    server, manager, reloader = started
    before = (manager.models, manager.memory_plan)
    server.path.write_text(PROFILE.replace("max_model_len: 128", "max_model_len: 99999"))
    server.refuse = ["model 'plain': engine argument max_model_len=99999: greater than the derived max_model_len"]
    with pytest.raises(ProfileRejected) as caught:
        await reloader.reload()
    (issue,) = caught.value.errors
    assert issue.file == str(server.path) and issue.message == server.refuse[0]
    assert (manager.models, manager.memory_plan) == before
    assert msgspec.json.encode(manager.snapshot())  # still serialisable for /admin/status
