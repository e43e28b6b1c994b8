"""The request profile's arithmetic: which stage a py-spy sample goes to, the floor's ratios, and the page."""

from __future__ import annotations

import msgspec
import pytest

from benchmarks.engine_floor import MARK, read_answer
from benchmarks.load import Workload
from benchmarks.ratios import summarize
from benchmarks.request_profile_results import (
    FLOOR,
    LOOP,
    OTHER,
    RequestProfile,
    RequestProfileOptions,
    floor_ratios,
    page_section,
    paired_cpu,
    stage_of,
    stage_shares,
)
from benchmarks.result_types import LoadResult, SteadyRound

_ROOT = "main (uvicorn/main.py:1);Runner.run (asyncio/runners.py:118)"


def test_a_sample_goes_to_its_innermost_matching_frame() -> None:
    # An SSE chunk encoded by pydantic inside the HTTP stack is encoding, not HTTP.
    encode = f"{_ROOT};handle (litestar/app.py:9);chunk (vllm/serving.py:3);model_dump_json (pydantic/main.py:4)"
    assert stage_of(encode.split(";")) == "encode and SSE"
    tokenize = f"{_ROOT};handle (litestar/app.py:9);encode (transformers/tokenization_utils.py:7)"
    assert stage_of(tokenize.split(";")) == "render and tokenize"
    assert stage_of(f"{_ROOT};acquire (server/engine/manager.py:5)".split(";")) == "admission and lease"


def test_the_event_loops_own_frames_are_native_work_under_it() -> None:
    assert stage_of(_ROOT.split(";")) == LOOP
    assert stage_of(["work (mine.py:1)"]) == OTHER


def test_shares_are_percentages_of_the_samples() -> None:
    total, shares = stage_shares([f"{_ROOT} 3", f"{_ROOT};acquire (server/engine/manager.py:5) 1", "garbage"])
    assert total == 4
    assert (shares[LOOP], shares["admission and lease"], shares[OTHER]) == (75.0, 25.0, 0.0)


def test_the_page_says_when_it_was_not_measured() -> None:
    assert "**Not measured**" in "\n".join(page_section(None))


def _row(server: str, round_no: int, cpu_ms: float) -> SteadyRound:
    return SteadyRound(
        round=round_no,
        server=server,
        workload=_WORKLOAD.label,
        completed=100,
        failed=0,
        req_per_s=25.0,
        ttft_p50_ms=10.0,
        ttft_p99_ms=50.0,
        cpu_ms_per_request=cpu_ms,
        first_error=None,
    )


_WORKLOAD = Workload("chat", True, 64, 100, request_rate=25.0)


def _profile(vllm: list[float], turnout: list[float], floor: list[float]) -> RequestProfile:
    rows = [_row("vllm", n, cpu) for n, cpu in enumerate(vllm, 1)] + [
        _row("turnout", n, cpu) for n, cpu in enumerate(turnout, 1)
    ]
    return RequestProfile(
        options=RequestProfileOptions(rounds=len(vllm)),
        commands={},
        seconds=1.0,
        rounds=rows,
        summary=summarize(rows, [_WORKLOAD]),
        paired_cpu=paired_cpu(rows, [_WORKLOAD.label]),
        stages=[],
        floor=[_row(FLOOR, n, cpu) for n, cpu in enumerate(floor, 1)],
    )


def test_the_floor_is_paired_with_vllms_rounds_not_turnouts() -> None:
    per_workload, pooled = floor_ratios(_profile([4.0, 5.0, 4.0], [1.0, 1.0, 1.0], [3.0, 3.0, 3.2]))
    assert pooled is not None and per_workload[_WORKLOAD.label] == pooled
    assert pooled.ratio == pytest.approx((0.75 * 0.6 * 0.8) ** (1 / 3))
    assert pooled.low < pooled.ratio < (pooled.high or 0)


def test_the_page_says_whether_the_floor_leaves_the_goal_any_room() -> None:
    above = "\n".join(page_section(_profile([4.0, 4.1, 3.9], [4.2, 4.2, 4.2], [3.6, 3.7, 3.5])))
    assert "the floor alone lies above 0.7x vLLM's server" in above
    # The goal (0.7 x the median 4.0 = 2.80) less the floor (3.6): no room for HTTP, parsing, rendering or encoding.
    assert "| chat stream 25/s | 3.60 | 0.90x" in above and "| 2.80 | -0.80 | 0.40 | 0.60 |" in above
    below = "\n".join(page_section(_profile([4.0, 4.1, 3.9], [4.2, 4.2, 4.2], [1.0, 1.1, 0.9])))
    assert "the floor lies below 0.7x" in below
    old = "\n".join(page_section(_profile([4.0], [4.2], [])))
    assert "No floor in this run" in old


def test_the_floors_answer_is_found_among_vllms_log_lines() -> None:
    answer = _row(FLOOR, 1, 2.5)
    fields = {name: getattr(answer, name) for name in LoadResult.__struct_fields__}
    lines = ["INFO 12-06 engine started\n", MARK + msgspec.json.encode(fields).decode() + "\n", "never read\n"]
    assert read_answer(iter(lines)).cpu_ms_per_request == 2.5
    with pytest.raises(RuntimeError, match="ended before it answered"):
        read_answer(iter(["INFO only a log line\n"]))
