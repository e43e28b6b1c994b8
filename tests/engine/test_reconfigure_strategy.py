"""The reconfigure strategy against a fake in-place swap: one engine host, rollback, restart fallbacks, reports.

The real swap runs in ``tests/engine/test_in_place_engines.py`` on tiny vLLM engines.
"""

from __future__ import annotations

from typing import Any

import pytest

from server.engine import SlotState, SwitchFailed
from server.engine.runtime.in_place_swap import PluginMissing, check_plugin
from server.engine.strategies import StrategyUnavailable, resolve_strategy_name, select_strategy
from server.engine.strategies.reconfigure import ReconfigureStrategy
from server.profiles.schema import Switching
from server.vllm_plugin.protocol import KeptKV
from tests.engine.conftest import MakeManager
from tests.fakes.engines import FakeLoader
from tests.fakes.in_place import FakeInPlaceSwap
from tests.fakes.manager_views import admitted, served_engine, state_of


@pytest.fixture
def swap() -> FakeInPlaceSwap:
    return FakeInPlaceSwap()


async def _answer(manager: Any) -> str:
    """The model that answers a request now (the fake engine yields the name of the model it holds)."""
    async with admitted(manager, None) as lease:
        return "".join([token async for token in lease.bundle.engine.generate(lease.request_id, 1)])


async def test_switches_reuse_one_engine_and_report_the_phases(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    manager = make_manager(ReconfigureStrategy(loader, swap))
    first = await manager.initialize("a")
    host = await served_engine(manager)
    assert first.method == "restart" and loader.loads == ["a"]
    assert sorted(swap.prepared) == ["b", "c"], "the other models' configs are built after the start"
    report = await manager.switch("b")
    assert (await served_engine(manager)) is host and loader.loads == ["a"], "no second engine"
    assert swap.unloads == ["a"] and swap.loads == ["b"]
    assert (report.method, report.unload_ms, report.load_ms, report.kv_cache_ms, report.frontend_ms) == (
        "reconfigure",
        5.0,
        10.0,
        4.0,
        2.0,
    )
    assert state_of(manager, "a") is SlotState.STOPPED and await _answer(manager) == "b"
    bundle_b = manager.published.bundle  # type: ignore[union-attr]
    await manager.switch("a")
    assert await _answer(manager) == "a"
    await manager.switch("b")
    assert manager.published.bundle is not bundle_b, "the same engine with another model needs a fresh bundle"  # type: ignore[union-attr]
    await manager.shutdown()
    assert loader.unloads == ["b"] and not host.alive


async def test_the_report_says_which_in_place_path_ran_and_counts_the_deferred_drop(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    swap.same_shape, swap.drop_ms = {"b"}, 7.0
    manager = make_manager(ReconfigureStrategy(loader, swap))
    await manager.initialize("a")
    weights = await manager.switch("b")
    assert (weights.method, weights.unload_ms) == ("weights", 5.0), "nothing dropped: the model was kept"
    full = await manager.switch("c")
    assert (full.method, full.unload_ms) == ("reconfigure", 12.0), "the pause plus dropping the kept model"
    await manager.shutdown()


async def test_the_report_says_what_the_unload_kept_of_the_prefix_cache(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    manager = make_manager(ReconfigureStrategy(loader, swap))
    await manager.initialize("a")
    off = await manager.switch("b")
    assert (off.kept_blocks, off.kept_bytes, off.keep_ms) == (None, None, None), "the pool is off: nothing to say"
    swap.kept = KeptKV(kept_blocks=12.0, kept_bytes=12 * 4096.0, keep_ms=3.5)
    kept = await manager.switch("a")
    assert (kept.kept_blocks, kept.kept_bytes, kept.keep_ms) == (12, 12 * 4096, 3.5)
    assert kept.unload_ms == 8.5, "the keep is part of the unload"
    assert manager.snapshot().last_switch == kept
    await manager.shutdown()


async def test_a_failed_target_reconfigures_back_to_the_previous_model(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    manager = make_manager(ReconfigureStrategy(loader, swap))
    await manager.initialize("a")
    swap.fail_load.add("b")
    with pytest.raises(SwitchFailed):
        await manager.switch("b")
    assert swap.loads == ["b", "a"] and loader.loads == ["a"], "rolled back in place, no restart"
    assert manager.active_model == "a" and state_of(manager, "b") is SlotState.FAILED
    assert await _answer(manager) == "a"


async def test_when_reconfiguring_back_fails_the_previous_model_restarts(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    manager = make_manager(ReconfigureStrategy(loader, swap))
    await manager.initialize("a")
    swap.fail_load |= {"b", "a"}
    with pytest.raises(SwitchFailed):
        await manager.switch("b")
    assert loader.loads == ["a", "a"] and loader.unloads == ["<broken>"], "the broken host was stopped, a restarted"
    assert manager.active_model == "a" and await _answer(manager) == "a"


async def test_a_mismatched_model_is_never_published(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    manager = make_manager(ReconfigureStrategy(loader, swap))
    await manager.initialize("a")
    swap.wrong_model.add("b")
    with pytest.raises(SwitchFailed, match="reports"):
        await manager.switch("b")
    assert manager.active_model == "a" and await _answer(manager) == "a"


async def test_a_pair_the_engine_cannot_swap_in_place_restarts(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    swap.incompatible["b"] = "tensor_parallel_size differs (1 -> 2)"
    manager = make_manager(ReconfigureStrategy(loader, swap))
    await manager.initialize("a")
    report = await manager.switch("b")
    assert report.method == "restart" and loader.loads == ["a", "b"] and len(loader.unloads) == 1
    assert await _answer(manager) == "b"
    report = await manager.switch("c")
    assert report.method == "reconfigure" and loader.loads == ["a", "b"]


async def test_a_failed_unload_stops_the_host_and_the_target_starts_fresh(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    manager = make_manager(ReconfigureStrategy(loader, swap))
    await manager.initialize("a")
    swap.fail_unload = True
    report = await manager.switch("b")
    assert report.method == "restart" and loader.loads == ["a", "b"] and len(loader.unloads) == 1
    assert await _answer(manager) == "b"


def test_reconfigure_runs_on_cpu_and_cuda_only() -> None:
    assert resolve_strategy_name("reconfigure", device="cpu", stash_available=False) == "reconfigure"
    assert resolve_strategy_name("reconfigure", device="cuda", stash_available=False) == "reconfigure"
    with pytest.raises(StrategyUnavailable, match="stash"):
        resolve_strategy_name("reconfigure", device="hpu", stash_available=True)
    loader, swap = FakeLoader(), FakeInPlaceSwap()
    built = select_strategy(Switching(strategy="reconfigure"), loader, device="cpu", in_place=swap)
    assert isinstance(built, ReconfigureStrategy)
    with pytest.raises(StrategyUnavailable, match="in-place swap"):
        select_strategy(Switching(strategy="reconfigure"), loader, device="cpu")


async def test_auto_keeps_while_memory_allows_then_reconfigures_the_oldest_resident(
    make_manager: MakeManager, loader: FakeLoader, swap: FakeInPlaceSwap
) -> None:
    room = {"another": True}
    strategy = select_strategy(
        Switching(strategy="auto"), loader, device="cpu", memory_allows=lambda: room["another"], in_place=swap
    )
    manager = make_manager(strategy)
    await manager.initialize("a")
    assert (await manager.switch("b")).method == "restart" and loader.loads == ["a", "b"]
    assert state_of(manager, "a") is SlotState.RESIDENT
    room["another"] = False
    report = await manager.switch("c")
    assert report.method == "reconfigure" and loader.loads == ["a", "b"], "a's engine took c in place"
    assert swap.unloads == ["a"] and swap.loads == ["c"]
    assert state_of(manager, "a") is SlotState.STOPPED and state_of(manager, "b") is SlotState.RESIDENT
    assert await _answer(manager) == "c"
    assert (await manager.switch("b")).switched and loader.loads == ["a", "b"], "b is still resident"


def test_the_strategy_refuses_to_start_without_its_vllm_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    check_plugin({})  # installed by scripts/setup.sh (pip install -e .)
    with pytest.raises(PluginMissing, match="VLLM_PLUGINS"):
        check_plugin({"VLLM_PLUGINS": "lora_filesystem_resolver"})
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    with pytest.raises(PluginMissing, match="pip install -e"):
        check_plugin({})


async def _name_bundle(name: str, profile: Any, engine: Any) -> str:
    return name


def _no_renderer(config: Any) -> Any:
    raise AssertionError("no model loads in this test")


def _auto_falls_back_to_keep() -> Any:
    """Check that ``strategy: auto`` builds a keep strategy without in-place swaps; the same profile asking for
    ``reconfigure``, for the caller to build."""
    from server.engine.factory import build_manager
    from server.engine.strategies import KeepStrategy
    from server.profiles.schema import ModelProfile, Profile

    models = {"a": ModelProfile(model="/m/a"), "b": ModelProfile(model="/m/b")}
    auto = build_manager(
        Profile(path="/p.yaml", default_model="a", models=models),
        _name_bundle,
        build_renderer=_no_renderer,
        device="cpu",
    )
    assert isinstance(auto._strategy, KeepStrategy) and auto._strategy._in_place is None
    return Profile(path="/p.yaml", default_model="a", models=models, switching=Switching(strategy="reconfigure"))


async def test_without_the_plugin_auto_falls_back_and_reconfigure_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from server.engine.factory import build_manager

    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")
    explicit = _auto_falls_back_to_keep()
    with pytest.raises(StrategyUnavailable, match="VLLM_PLUGINS"):
        build_manager(explicit, _name_bundle, build_renderer=_no_renderer, device="cpu")
    monkeypatch.delenv("VLLM_PLUGINS")
    assert (
        build_manager(explicit, _name_bundle, build_renderer=_no_renderer, device="cpu").strategy_name == "reconfigure"
    )


async def test_on_a_vllm_before_the_plugins_range_auto_falls_back_and_reconfigure_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import vllm

    from server.engine.factory import build_manager
    from server.profiles.vllm_version import ALLOW_UNKNOWN_ENV, IN_PLACE_ADAPTER, SUPPORTED_VLLM

    monkeypatch.delenv(ALLOW_UNKNOWN_ENV, raising=False)
    if vllm.__version__ in SUPPORTED_VLLM[IN_PLACE_ADAPTER]:
        monkeypatch.setattr(vllm, "__version__", "0.28.0")  # scripts/compat.sh runs this on a real 0.28.0
    explicit = _auto_falls_back_to_keep()
    reason = rf"\(server/vllm_plugin/\) supports vLLM 0\.32\.0 to 0\.33\.x; found {vllm.__version__}"
    with pytest.raises(StrategyUnavailable, match=reason):
        build_manager(explicit, _name_bundle, build_renderer=_no_renderer, device="cpu")


async def test_target_configs_build_in_the_background_and_the_switch_reuses_them() -> None:
    import asyncio

    from server.engine.runtime.in_place_swap import InPlaceSwap
    from server.profiles.schema import ModelProfile

    built: list[str] = []

    def build_config(name: str, profile: ModelProfile) -> Any:
        if name == "bad":
            raise ValueError("no such model")
        built.append(name)
        return {"model": profile.model}  # cloudpickled as the real VllmConfig is

    def renderer(config: Any) -> Any:
        raise AssertionError("nothing is rendered here")

    swap = InPlaceSwap(build_config, renderer)
    models = [("bad", ModelProfile(model="/m/bad")), ("b", ModelProfile(model="/m/b"))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("server.engine.runtime.in_place_swap._pickle_target", _plain_target)
        swap.prepare(models)
        swap.prepare(models)  # a second call while the first runs starts nothing new
        await asyncio.wait_for(swap._preparing, 30)  # type: ignore[arg-type]
        assert built == ["b"], "a config that fails is left to its switch"
        target = await swap.target("b", ModelProfile(model="/m/b"))
    assert target.model == "/m/b" and built == ["b"], "the switch reuses the config built ahead"


def _plain_target(profile: Any, config: Any) -> Any:
    import cloudpickle

    from server.engine.runtime.in_place_swap import TargetConfig

    return TargetConfig(
        profile=profile, payload=cloudpickle.dumps(config), model=config["model"], served_model_name="b"
    )
