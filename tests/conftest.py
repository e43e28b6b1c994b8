"""Session fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["tiny_models"]


@pytest.fixture(scope="session")
def tiny_models() -> Iterator[dict[str, Path]]:
    """``{"tiny-tools": folder, "tiny-plain": folder}``, built once into ``.cache/tiny-models`` or
    ``$TURNOUT_TINY_MODELS``.

    The first run on a machine builds them (about 20 s); later runs reuse the cache at no cost.
    """
    # Imported here, not at the top: torch and transformers would slow down every test session, even one that
    # never touches a model.
    from server.tinymodels import build_tiny_models

    yield build_tiny_models()
