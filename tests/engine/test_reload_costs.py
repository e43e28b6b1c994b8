"""The cost book: what bringing each model up cost, per path, from the switch reports, kept in the private state
folder across restarts, and its JSON Schema as ``docs/residency.md`` shows it."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from server.engine import StateDir
from server.engine.types import (
    COSTS_FILE,
    FIRST_FINGERPRINT,
    CostBook,
    EngineStart,
    SwitchReport,
    Verification,
    costs_schema,
    reload_path,
)

ROOT = Path(__file__).resolve().parents[2]


def _report(target: str, duration_ms: float, **fields: Any) -> SwitchReport:
    fields.setdefault("switched", True)
    return SwitchReport(previous_model="other", current_model=target, duration_ms=duration_ms, **fields)


def test_each_report_counts_on_its_path_without_the_drain() -> None:
    start = EngineStart(started_at=0.0, total_ms=3000, phases_ms={"weights": 1000, "kv_cache": 500})
    cold = _report("big", 5000.0, drain_ms=1000.0, engine_start=start)
    in_place = _report("big", 400.0, method="weights", load_ms=300.0, kv_cache_ms=50.0)
    warm = _report("small", 120.0)
    assert [reload_path(r) for r in (cold, in_place, warm)] == ["cold", "in_place", "warm"]
    book = CostBook()
    for report in (cold, in_place, warm, _report("small", 0.0, switched=False)):
        book.record(report)
    assert book.seconds("big", "cold") == pytest.approx(4.0)  # 5 s less the 1 s drain
    assert book.seconds("big", "in_place") == pytest.approx(0.4)
    assert book.seconds("small", "warm") == pytest.approx(0.12)
    assert book.return_s("big") == pytest.approx(4.0) and book.return_s("small") == pytest.approx(0.12)
    assert book.return_s("never") is None
    phases = book.document().models["big"].cold
    expected = {"engine_start": 3000.0, "start.weights": 1000.0, "start.kv_cache": 500.0}
    assert phases is not None and phases.phases_ms == expected
    book.add("small", "warm", 0.24)
    warm_cost = book.document().models["small"].warm
    assert warm_cost is not None and warm_cost.count == 2 and warm_cost.mean_s == pytest.approx(0.18)
    assert warm_cost.last_s == pytest.approx(0.24)


def test_a_first_starts_wait_for_the_engine_launcher_is_not_a_reloads_cost() -> None:
    # A server's first start waited 20 s for the launcher's warm-up before its 3 s start: a reload pays the 3 s.
    first = EngineStart(started_at=0.0, total_ms=3000, phases_ms={}, forked=True, waited_ms=20_000)
    book = CostBook()
    book.record(_report("tools", 23_500.0, engine_start=first))
    assert book.seconds("tools", "cold") == pytest.approx(3.5)
    later = EngineStart(started_at=0.0, total_ms=2800, phases_ms={}, forked=True)
    book.record(_report("tools", 3_300.0, engine_start=later))
    assert book.seconds("tools", "cold") == pytest.approx(3.4)


def test_a_start_up_switchs_cost_stands_only_until_a_reload_is_measured() -> None:
    book = CostBook()
    book.record(
        _report("tools", 17_000.0, engine_start=EngineStart(started_at=0.0, total_ms=2000, phases_ms={})),
        at_startup=True,
    )
    first = book.document().models["tools"].cold
    assert first is not None and first.provisional and book.return_s("tools") == pytest.approx(17.0)
    book.add("tools", "cold", 3.0)  # the first reload replaces the start-up's one-offs
    assert book.seconds("tools", "cold") == pytest.approx(3.0)
    book.add("tools", "cold", 20.0, provisional=True)  # a later start-up (a restart) never dilutes a reload's
    book.add("tools", "cold", 4.0)
    cold = book.document().models["tools"].cold
    assert cold is not None and not cold.provisional and cold.count == 2 and cold.mean_s == pytest.approx(3.5)


def test_a_checkpoints_first_proof_is_a_one_off_too() -> None:
    start = EngineStart(started_at=0.0, total_ms=2000, phases_ms={})
    first = Verification(outcome="passed", duration_ms=9000.0, path="fork", detail=FIRST_FINGERPRINT)
    book = CostBook()
    book.record(_report("plain", 11_000.0, engine_start=start, verify=first))
    assert book.seconds("plain", "cold") == pytest.approx(11.0)
    again = Verification(outcome="passed", duration_ms=400.0, path="fork", detail="the same 8 tokens")
    book.record(_report("plain", 2_500.0, engine_start=start, verify=again))
    assert book.seconds("plain", "cold") == pytest.approx(2.5)  # replaced, not averaged with the first proof


def test_the_book_is_kept_private_and_survives_a_restart(tmp_path: Path) -> None:
    folder = StateDir(tmp_path / "state" / "turnout")
    CostBook(folder).add("big", "cold", 12.5, {"engine_start": 12000.0})
    saved = folder.root / COSTS_FILE
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    again = CostBook(folder)
    assert again.seconds("big", "cold") == 12.5
    assert again.document() == msgspec.json.decode(saved.read_bytes(), type=type(again.document()))


def test_a_damaged_book_is_measured_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = StateDir(tmp_path / "state" / "turnout")
    folder.write_private(COSTS_FILE, '{"models": {"big": {"cold": {"count": "x"}}}}')
    book = CostBook(folder)
    assert book.document().models == {}
    assert "not used" in caplog.text
    book.add("big", "warm", 1.0)  # and it is replaced by what is measured now
    assert CostBook(folder).seconds("big", "warm") == 1.0


def test_the_documented_schema_is_the_codes() -> None:
    text = (ROOT / "docs" / "residency.md").read_text(encoding="utf-8")
    section = text.split("## Reload costs", 1)[1]
    block = re.search(r"```json\n(.*?)\n```", section, re.DOTALL)
    assert block is not None, "docs/residency.md's reload costs section has no JSON Schema"
    assert json.loads(block.group(1)) == costs_schema()
