"""Session fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from server.tinymodels import build_tiny_models

__all__ = ["tiny_models"]

# Property tests and the randomized concurrency test draw this many cases each: few in the suite (CI runs it),
# ten times as many with `pytest --hypothesis-profile thorough`.
settings.register_profile("suite", max_examples=40)
settings.register_profile("thorough", max_examples=400)
settings.load_profile("suite")


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    """``{"tiny-tools": folder, "tiny-plain": folder}``, built into ``.cache/tiny-models`` (or
    ``$TURNOUT_TINY_MODELS``).

    The first run on a machine builds them (about 20 s); later runs find them cached in well under a second.
    """
    return build_tiny_models()
