"""Session fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.tinymodels import build_tiny_models

__all__ = ["tiny_models"]


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    """``{"tiny-tools": folder, "tiny-plain": folder}``, built into ``.cache/tiny-models`` (or
    ``$TURNOUT_TINY_MODELS``).

    The first run on a machine builds them (about 20 s); later runs find them cached in well under a second.
    """
    return build_tiny_models()
