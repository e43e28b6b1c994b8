"""``benchmarks/residency_live.py``'s profile and trace, as ``turnout simulate`` and ``turnout serve`` read them (the
replays themselves need a server: the benchmark, not a test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.residency_live import (
    MAX_ACTIVE,
    MODELS,
    PROMPT_TOKENS,
    ResidencyLiveOptions,
    live_profile,
    live_trace,
    within_band,
    write_trace,
)
from server.engine import read_trace
from server.profiles import validate_profile


def test_the_profile_holds_fewer_engines_than_it_has_models(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    del tiny_models  # built, so that the profile's paths exist
    result = validate_profile(str(live_profile(tmp_path)), env={})

    assert result.profile is not None and not result.errors, result.errors
    profile = result.profile
    assert list(profile.models) == list(MODELS) and profile.default_model == MODELS[0]
    switching = profile.switching
    assert (switching.mode, switching.strategy, switching.max_active) == ("auto", "keep", MAX_ACTIVE)
    assert len(MODELS) > MAX_ACTIVE  # the device must evict


def test_the_default_trace_asks_for_every_model_and_reads_back_as_written(tmp_path: Path) -> None:
    trace = live_trace(ResidencyLiveOptions())

    read = read_trace(write_trace(tmp_path / "trace.csv", trace))

    assert [(item.model, item.prompt_tokens, item.output_tokens) for item in read] == [
        (item.model, item.prompt_tokens, item.output_tokens) for item in trace
    ]
    # The trace reader counts from the first request.
    assert [item.at for item in read] == pytest.approx([item.at - trace[0].at for item in trace], abs=1e-3)
    assert {item.model for item in trace} == set(MODELS)  # three models on two engines: evictions
    assert trace[-1].at - trace[0].at > 60
    assert all(PROMPT_TOKENS[0] <= item.prompt_tokens <= PROMPT_TOKENS[1] for item in trace)


def test_the_band_is_thirty_percent_either_way_compared_unrounded() -> None:
    assert within_band(14, 15) and within_band(13, 10) and not within_band(13, 20)
    # 15.524 s against 22.175 s is 6.651 s apart, within 30 % (6.6525 s), though its ratio rounds to 0.7.
    assert within_band(15.524, 22.175) and not within_band(15.5, 22.175)
    assert not within_band(1, 0)
