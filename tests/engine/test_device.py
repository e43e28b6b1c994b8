"""The device is the one owner of slot state: its intents check the state they leave, and nothing else writes."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from server.engine.strategies import KeepStrategy, StopStrategy
from server.engine.switching.model_slots import ModelSlots
from server.engine.types.errors import ManagerClosed
from server.engine.types.states import IllegalTransition, SlotState
from server.engine.types.strategy import Parked, SwitchStrategy
from tests.fakes.engines import FakeBundleBuilder, FakeLoader, fake_models

SERVER = Path(__file__).resolve().parents[2] / "server"
#: The owner's module: ``ModelSlots``'s intents, and the strategy's room over it.
OWNERS = (SERVER / "engine" / "switching" / "model_slots.py",)
SLOT_MODULE = SERVER / "engine" / "types" / "states.py"
#: What changes a slot: its underscore methods and attributes (``Slot`` exposes only read-only properties).
SLOT_WRITES = frozenset(
    {"_move", "_attach", "_detach", "_hold_bundle", "_drop_bundle", "_set_profile", "_touch", "_state", "_reason"}
)


def slot_writes(path: Path) -> list[str]:
    """``file:line: name`` of every use of a slot-changing name in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr in SLOT_WRITES:
            found.append(f"{path.relative_to(SERVER.parent)}:{node.lineno}: {node.attr}")
    return found


def test_only_the_device_changes_a_slot() -> None:
    others = [path for path in sorted(SERVER.rglob("*.py")) if path not in (*OWNERS, SLOT_MODULE)]
    assert [write for path in others for write in slot_writes(path)] == []


def test_the_scan_sees_the_devices_own_writes() -> None:
    # The test must be able to fail: the owner's writes are there to be seen, with the names the scan looks for.
    writes = {"_move", "_attach", "_detach", "_hold_bundle", "_set_profile", "_touch"}
    assert writes <= {write.rsplit(": ", 1)[1] for write in slot_writes(OWNERS[0])}


class _StashLike(KeepStrategy):
    """Parks as the stash does: the host keeps the runner, the slot holds nothing."""

    async def park(self, name: str, engine: Any) -> Parked:
        return Parked(SlotState.STASHED)


def _device(strategy: SwitchStrategy | None = None) -> ModelSlots[Any]:
    return ModelSlots(fake_models("a", "b"), strategy or KeepStrategy(FakeLoader()), FakeBundleBuilder())


async def test_an_intent_from_an_unexpected_state_names_both_states() -> None:
    device = _device()
    with pytest.raises(IllegalTransition, match="a: expected loading to move to active, found stopped"):
        device.activated("a")  # stopped -> active skips loading
    await device.bring_up("a")
    with pytest.raises(IllegalTransition, match="expected active to move to draining, found loading"):
        await device.drain_active("a", 0.0, ManagerClosed(), "test", 0.0)
    assert device.slots["a"].state is SlotState.LOADING, "a refused intent changes nothing"


async def test_failed_carries_its_reason_frees_the_engine_and_every_other_state_clears_it() -> None:
    loader = FakeLoader()
    device = _device(KeepStrategy(loader))
    await device.bring_up("a")
    await device.fail("a", "boom")
    slot = device.slots["a"]
    assert (slot.state, slot.reason, slot.engine) == (SlotState.FAILED, "boom", None)
    assert loader.unloads == ["a"], "the engine it held is freed"
    await device.bring_up("b")
    with pytest.raises(IllegalTransition, match="failed needs a reason"):
        await device.fail("b", "")
    assert device.slots["b"].engine is not None, "a refused intent keeps the engine"
    await device.bring_up("a")
    assert device.slots["a"].reason is None


async def test_a_bundle_never_outlives_the_engine_it_was_built_for() -> None:
    device = _device(StopStrategy(FakeLoader()))
    with pytest.raises(IllegalTransition, match="a bundle needs an engine"):
        await device.publish("a")
    await device.bring_up("a")
    published = await device.publish("a")
    assert device.slots["a"].published is published and published.model == "a"
    assert await device.publish("a") is published, "the same engine: the bundle stays"
    device.activated("a")
    await device.drain_active("a", 0.0, ManagerClosed(), "test", 0.0)
    await device.park("a")  # stop: the engine goes, and its bundle with it
    assert device.slots["a"].published is None and device.slots["a"].engine is None
    await device.bring_up("a")  # another engine: a new bundle
    assert device.slots["a"].published is None and (await device.publish("a")) is not published


async def test_a_parked_slot_keeps_what_the_strategy_says() -> None:
    device = _device(_StashLike(FakeLoader()))
    await device.bring_up("a")
    device.activated("a")
    await device.drain_active("a", 0.0, ManagerClosed(), "test", 0.0)
    await device.park("a")
    assert (device.slots["a"].state, device.slots["a"].engine) == (SlotState.STASHED, None)
    assert device.is_warm("a") and not device.is_warm("b")


def test_leases_count_only_on_the_published_model() -> None:
    device = _device()
    with pytest.raises(IllegalTransition, match="a lease on 'a'"):
        device.lease("a")
    assert device.in_flight("a") == 0
