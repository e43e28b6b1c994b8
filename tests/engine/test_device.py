"""The device is the one owner of slot state: its intents check the state they leave, and nothing else writes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from server.engine.device import Device
from server.engine.states import IllegalTransition, SlotState
from server.engine.strategies import KeepStrategy
from server.engine.strategies.base import Parked
from tests.fakes.engines import FakeLoader, fake_models

SERVER = Path(__file__).resolve().parents[2] / "server"
#: The device's modules: ``Device``'s intents and the reload side it inherits (its views only read).
OWNERS = (SERVER / "engine" / "device.py", SERVER / "engine" / "device_reload.py")
SLOT_MODULE = SERVER / "engine" / "states.py"
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
    for owner, writes in zip(
        OWNERS, ({"_move", "_attach", "_detach", "_hold_bundle"}, {"_move", "_set_profile"}), strict=True
    ):
        assert writes <= {write.rsplit(": ", 1)[1] for write in slot_writes(owner)}, owner


def _device() -> Device[str]:
    return Device(fake_models("a", "b"), KeepStrategy(FakeLoader()))


def test_an_intent_from_an_unexpected_state_names_both_states() -> None:
    device = _device()
    with pytest.raises(IllegalTransition, match="a: expected loading to move to active, found stopped"):
        device.activated("a")  # stopped -> active skips loading
    device.start_loading("a")
    with pytest.raises(IllegalTransition, match="expected active to move to draining, found loading"):
        device.start_draining("a")
    assert device.slots["a"].state is SlotState.LOADING, "a refused intent changes nothing"


def test_failed_carries_its_reason_and_every_other_state_clears_it() -> None:
    device = _device()
    device.start_loading("a")
    device.brought_up("a", "engine-a")
    assert device.failed("a", "boom") == "engine-a", "the engine goes back to the caller to free"
    slot = device.slots["a"]
    assert (slot.state, slot.reason, slot.engine) == (SlotState.FAILED, "boom", None)
    device.start_loading("b")
    with pytest.raises(IllegalTransition, match="failed needs a reason"):
        device.failed("b", "")
    device.start_loading("a")
    assert device.slots["a"].reason is None


def test_a_bundle_never_outlives_the_engine_it_was_built_for() -> None:
    device = _device()
    device.start_loading("a")
    with pytest.raises(IllegalTransition, match="a bundle needs an engine"):
        device.hold_bundle("a", "bundle")
    device.brought_up("a", "engine-1")
    published = device.hold_bundle("a", "bundle-1")
    assert device.slots["a"].published is published and (published.model, published.bundle) == ("a", "bundle-1")
    device.brought_up("a", "engine-1")  # the same engine: the bundle stays
    assert device.slots["a"].published is published
    device.brought_up("a", "engine-2")  # another engine (a fresh load, the stash's host): the bundle is stale
    assert device.slots["a"].published is None and device.slots["a"].engine == "engine-2"


def test_a_parked_slot_keeps_what_the_strategy_says() -> None:
    device = _device()
    device.start_loading("a")
    device.brought_up("a", "engine-a")
    device.activated("a")
    device.start_draining("a")
    device.parked("a", Parked(SlotState.STASHED))  # the stash's host keeps the runner, the slot holds nothing
    assert (device.slots["a"].state, device.slots["a"].engine) == (SlotState.STASHED, None)
    assert device.is_warm("a") and not device.is_warm("b")


def test_leases_count_only_on_the_published_model() -> None:
    device = _device()
    with pytest.raises(IllegalTransition, match="a lease on 'a'"):
        device.lease("a")
    assert device.in_flight("a") == 0
