"""Real tiny engines for the frontend tests.

Each engine fixture is module-scoped, and the generate and embedding tests live in different modules, so the
session never runs two vLLM engines at once (the machine is shared; each engine takes about 25 s to start).
`tiny_models` comes from tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.frontend.tiny import CLASSIFY_MODEL, EMBED_MODEL, TOOLS_MODEL, start_engine


@pytest.fixture(scope="module")
async def tools_engine(tiny_models: dict[str, Path]) -> AsyncIterator[Any]:
    """tiny-tools as a generating model (trained to answer tool prompts with one hermes call)."""
    engine = start_engine(tiny_models[TOOLS_MODEL], TOOLS_MODEL)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
async def embed_engine(tiny_models: dict[str, Path]) -> AsyncIterator[Any]:
    """tiny-plain converted by vLLM into an embedding (pooling) model."""
    engine = start_engine(tiny_models["tiny-plain"], EMBED_MODEL, runner="pooling", convert="embed")
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
async def classify_engine(tiny_models: dict[str, Path]) -> AsyncIterator[Any]:
    """tiny-plain converted by vLLM into a two-label sequence classifier.

    The head is two rows of the model's own LM head (vLLM's ``no_post_processing`` conversion, for the tokens "a"
    and "b"): without them vLLM leaves a head the checkpoint lacks uninitialised, and memory that held NaN once
    made the probabilities unencodable as JSON (a failed run).
    """
    head = {"method": "no_post_processing", "classifier_from_token": ["a", "b"]}
    engine = start_engine(
        tiny_models["tiny-plain"], CLASSIFY_MODEL, runner="pooling", convert="classify", hf_overrides=head
    )
    yield engine
    engine.shutdown()
