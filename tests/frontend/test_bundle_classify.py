"""A bundle over a real tiny classification engine: tiny-plain converted by vLLM into a two-label classifier."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from server.frontend import FrontendBundle, FrontendSettings, JsonResult, build_bundle
from tests.frontend.tiny import CLASSIFY_MODEL

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
async def classifier(classify_engine: Any) -> FrontendBundle:
    return await build_bundle(CLASSIFY_MODEL, classify_engine, FrontendSettings())


async def test_classify_and_pooling_answer_and_score_is_a_404_for_two_labels(classifier: FrontendBundle) -> None:
    result = await classifier.call("classify", {"input": ["hello", "weather"]}, uuid.uuid4().hex)
    assert isinstance(result, JsonResult) and result.status_code == 200, result.payload
    rows = result.payload["data"]
    assert [row["index"] for row in rows] == [0, 1] and all(len(row["probs"]) == 2 for row in rows)
    assert all(sum(row["probs"]) == pytest.approx(1.0, abs=1e-3) for row in rows)
    pooled = await classifier.call("pooling", {"input": "hello"}, uuid.uuid4().hex)
    assert isinstance(pooled, JsonResult) and pooled.status_code == 200, pooled.payload
    # vLLM scores with a classifier only when it has one label (a cross-encoder); with two it has no /score.
    scored = await classifier.call("score", {"text_1": "a", "text_2": "b"}, uuid.uuid4().hex)
    assert isinstance(scored, JsonResult) and scored.status_code == 404
    assert CLASSIFY_MODEL in scored.payload["error"]["message"]
    embedded = await classifier.call("embeddings", {"input": "hello"}, uuid.uuid4().hex)
    assert isinstance(embedded, JsonResult) and embedded.status_code == 404
