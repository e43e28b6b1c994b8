"""Every committed result file decodes into its Struct, and a result written comes back equal."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from benchmarks import docs_page, results
from benchmarks.cold_start_results import ColdStart
from benchmarks.kv_keep import KvKeep
from benchmarks.request_profile_results import RequestProfile
from benchmarks.residency_live import ResidencyLive
from benchmarks.residency_policies import ResidencyPolicies
from benchmarks.result_types import (
    AutoMode,
    AutoModeConfig,
    AutoRow,
    Captured,
    ClusterSimulation,
    EngineLimit,
    ReliabilityLong,
    Result,
    RunAll,
    SteadyState,
    SwitchLatency,
)
from benchmarks.switch_proof import SwitchProof
from benchmarks.switch_weights import SwitchWeights
from server.tinymodels.spec import REPO_ROOT

COMMITTED = REPO_ROOT / "benchmarks" / "results"

#: A result file's name (less ``.json``) gives its type: the exact names, then the prefixes of their variants.
_EXACT: dict[str, type[Result]] = {
    "auto_mode": AutoMode,
    "cluster_simulation": ClusterSimulation,
    "engine_limit": EngineLimit,
    "kv_keep": KvKeep,
    "reliability_long": ReliabilityLong,
    "residency_live": ResidencyLive,
    "residency_policies": ResidencyPolicies,
    "run_all": RunAll,
    "scheduler_simulation": Captured,
    "switch_latency": SwitchLatency,
}
_PREFIXES: dict[str, type[Result]] = {
    "cold_start": ColdStart,
    "request_profile": RequestProfile,
    "steady_state": SteadyState,
    "switch_weights": SwitchWeights,
    "switch_proof": SwitchProof,
}


def _kind(name: str) -> type[Result]:
    if name in _EXACT:
        return _EXACT[name]
    for prefix, kind in _PREFIXES.items():
        if name.startswith(prefix):
            return kind
    raise AssertionError(f"{name}.json has no result type: add it to benchmarks/result_types.py and to this test")


_FILES = sorted(COMMITTED.glob("*.json"))


def test_every_kind_of_result_is_committed() -> None:
    # Guards the parametrized test below against passing vacuously (an empty or moved folder).
    names = {path.stem for path in _FILES}
    assert set(_EXACT) <= names
    assert {prefix for prefix in _PREFIXES if any(name.startswith(prefix) for name in names)} == set(_PREFIXES)


@pytest.mark.parametrize("path", _FILES, ids=[path.stem for path in _FILES])
def test_a_committed_result_file_decodes_into_its_struct(path: Path) -> None:
    kind = _kind(path.stem)

    decoded = msgspec.json.decode(path.read_bytes(), type=kind)

    assert isinstance(decoded, kind)
    assert decoded.machine.turnout_commit


def test_a_result_written_reads_back_equal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert results.read_result("run_all", RunAll) is None, "a benchmark that has not run has no result"
    committed = msgspec.json.decode((COMMITTED / "run_all.json").read_bytes(), type=RunAll)

    results.write_result("run_all", committed)

    assert results.read_result("run_all", RunAll) == committed


def test_a_nan_figure_is_written_as_null_and_shown_as_n_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # JSON has no NaN: a block where no request was answered must still write a file the page can read.
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    row = AutoRow(
        block=1,
        requests=4,
        concurrency=2,
        req_per_s=0.0,
        latency_p50_ms=math.nan,
        latency_p99_ms=math.nan,
        switches_seen=0,
        ok=0,
        refused=0,
        lost=4,
        wrong=0,
    )
    config = AutoModeConfig(requests=4, concurrency=2, strategy="keep")
    results.write_result("auto_mode", AutoMode(config=config, rows=[row], goals={"0 lost": False}))

    decoded = results.read_result("auto_mode", AutoMode)

    assert decoded is not None and decoded.rows[0].latency_p50_ms is None
    assert "| 1 | 0.0 | n/a | n/a | 0 | 0 | 0 | 4 | 0 |" in docs_page.render()


def test_a_file_that_drifts_from_its_type_fails_with_the_field_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    committed = msgspec.json.decode((COMMITTED / "cold_start.json").read_bytes())
    committed["medians"]["total_s"] = "fast"
    (tmp_path / "cold_start.json").write_bytes(msgspec.json.encode(committed))

    with pytest.raises(msgspec.ValidationError, match=r"\$\.medians\.total_s"):
        results.read_result("cold_start", ColdStart)
