"""The engine's shape, held where a test can hold it: one change path to the scheduler, the
model slots' owner in one module, no import circles between modules, and the facts that were stated twice stated
once (the order of the engine's packages is ``tests/test_layers.py``'s).

Each measure comes from ``engine_room_census.py``, the script that gave the refactor's before/after table; the last
tests feed the measures a case they must catch, so each check is able to fail.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tests.engine import engine_room_census as census

#: Who may drive the scheduler from outside the admission, and why.
DRIVERS_ALLOWED = {
    # ``turnout simulate`` plays the device itself on a fake clock: it is the scheduler's driver there, as the
    # admission is in a server (its own scheduler, never a server's).
    "simulation.driver": 3,  # a switch's start, its drain's end (where keep makes room), its end
}


def test_nothing_tells_the_scheduler_of_a_change_from_outside() -> None:
    # The scheduler hears of every change through the device's change signal (admission.py subscribes).
    assert census.scheduler_notifications() == DRIVERS_ALLOWED


def test_no_import_circles_in_the_engine() -> None:
    assert census.import_circles() == []


def test_the_model_slots_are_one_class_in_one_module() -> None:
    device_modules = [name for name in census.engine_modules() if census.DEVICE_MODULE.match(name)]
    assert device_modules == ["switching.model_slots"]
    classes = [cls.name for cls in census._device_classes() if not cls.name.startswith("_")]
    assert classes == ["SwitchUnderWay", "ModelSlots"]
    device = next(cls for cls in census._device_classes() if cls.name == "ModelSlots")
    assert [ast.unparse(base) for base in device.bases] == ["Generic[B]"], "no mixin layers"


@pytest.mark.parametrize(
    "fact",
    [
        "closed (modules keeping a _closed flag)",
        "model list (device slots + other _models copies)",
        "restart bookkeeping (modules)",
        "SchedulerPolicy built",
        "hold timeout drain_timeout + 60",
        "'removes the active model' refusal",
    ],
)
def test_a_fact_is_stated_once(fact: str) -> None:
    assert census.facts()[fact] == 1


def test_no_mode_is_compared_as_a_string_in_the_engine() -> None:
    # Every mode check reads the one SchedulerPolicy (policy.auto).
    assert census.facts()["mode compared as a string"] == 0


def test_a_scheduler_notification_from_outside_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "residency.py").write_text(
        textwrap.dedent(
            """
            def after_unload(self):
                self._admission.device_changed()
                self.admission.scheduler.switch_ended(None, 0.0, ok=True)
            """
        )
    )
    (engine / "a.py").write_text("from server.engine.b import x\n")
    (engine / "b.py").write_text("from server.engine import a\n")
    (engine / "healing.py").write_text('if self._mode == "manual":\n    pass\n')
    monkeypatch.setattr(census, "ENGINE", engine)
    assert census.scheduler_notifications() == {"residency": 2}
    assert census.import_circles() == [["a", "b"]]
    assert census.facts()["mode compared as a string"] == 1
