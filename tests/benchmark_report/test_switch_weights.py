"""The realistic-size switch benchmark's arithmetic: warm medians, ratios to the floor, goals, the page section."""

from __future__ import annotations

import msgspec

from benchmarks.results import machine
from benchmarks.switch_weights import ENGINE_ARGS, Row, Sample, SwitchWeightsConfig, page_section, report
from benchmarks.weight_models import Floors

FLOORS = Floors(weight_bytes=2**30, memcpy_ms=100.0, page_cache_read_ms=200.0, safetensors_copy_ms=400.0)
CONFIG = SwitchWeightsConfig(rounds=2, rss_switches=4, engine_args=ENGINE_ARGS)


def _row(label: str, switch_ms: list[float], rss: list[float] | None = None, method: str = "weights") -> Row:
    rss = rss or [1000.0] * len(switch_ms)
    return Row(
        label=label,
        samples=[
            Sample(target="b", switch_ms=ms, ttft_ms=5.0, engine_rss_mb=mb, method=method, phases={"load_ms": ms / 2})
            for ms, mb in zip(switch_ms, rss, strict=True)
        ],
    )


def test_warm_medians_leave_the_first_switch_out_and_ratios_use_the_safetensors_floor() -> None:
    rows = [
        _row("reconfigure, same arch", [900.0, 500.0, 560.0, 520.0]),
        _row("reconfigure, other arch", [1200.0, 900.0, 1000.0], method="reconfigure"),
        _row("reconfigure, RSS drift", [500.0] * 4, rss=[1000.0, 1030.0, 1080.0, 990.0]),
    ]
    data = report(rows, FLOORS, CONFIG)
    same = data.summary["reconfigure, same arch"]
    assert (same.first_switch_ms, same.switch_ms, same.over_safetensors) == (900.0, 520.0, 1.3)
    assert same.methods == ["weights"] and same.load_ms == 260.0
    assert "reconfigure, RSS drift" not in data.summary, "the drift row only feeds its goal"
    assert data.measured["reconfigure first switch / warm"] == round(900 / 520, 2)
    assert data.measured["engine RSS drift over the alternating swaps"] == 0.08
    assert data.measured["reconfigure, other arch / safetensors floor"] == 2.38  # 950 / 400
    assert data.goals == {
        "reconfigure, same arch / safetensors floor": True,
        "reconfigure, other arch / safetensors floor": True,
        "reconfigure first switch / warm": False,
        "engine RSS drift over the alternating swaps": False,
    }


def test_the_page_shows_both_runs_floors_and_goals() -> None:
    data = report([_row("reconfigure, same arch", [900.0, 500.0])], FLOORS, CONFIG)
    data = msgspec.structs.replace(
        data, machine=msgspec.structs.replace(machine(), date="2026-12-01 10:00 UTC", turnout_commit="abc")
    )
    page = "\n".join(page_section(data, before=data))
    assert page.count("(2026-12-01 10:00 UTC, commit `abc`)") == 2
    assert page.count("safetensors get_tensor + copy **400.0 ms**") == 2
    assert "| reconfigure, same arch | 500 | 900 | **1.25x** |" in page
    assert "**MISSED**: reconfigure, other arch / safetensors floor" in page, "an unmeasured goal is not met"
    assert "Not measured" in "\n".join(page_section(None))


def test_the_cpu_packing_floor_adds_a_ratio_and_a_run_without_it_shows_none() -> None:
    floors = msgspec.structs.replace(FLOORS, cpu_gemm_packing_ms=250.0)
    data = report([_row("reconfigure, same arch", [900.0, 1300.0])], floors, CONFIG)
    assert floors.cpu_load_ms == 650.0
    assert data.summary["reconfigure, same arch"].over_cpu_load == 2.0  # 1300 / (400 + 250)
    page = "\n".join(page_section(data))
    assert "GEMM packing of the linear weights 250.0 ms (copy + packing: **650.0 ms**" in page
    assert "| reconfigure, same arch | 1,300 | 900 | **3.25x** | 2.0x |" in page
    without = report([_row("reconfigure, same arch", [900.0, 1300.0])], FLOORS, CONFIG)
    assert without.summary["reconfigure, same arch"].over_cpu_load is None
    assert "| **3.25x** | n/a |" in "\n".join(page_section(without))
