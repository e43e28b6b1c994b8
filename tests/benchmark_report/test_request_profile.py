"""The request profile's arithmetic: which stage a py-spy sample goes to, and the page without a result."""

from __future__ import annotations

from benchmarks.request_profile_results import LOOP, OTHER, page_section, stage_of, stage_shares

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
