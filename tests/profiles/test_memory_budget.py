"""The memory budget: sizes, fractions and the default (which models fit in it together is the residency policy's:
``tests/engine/test_residency_policy.py``)."""

from __future__ import annotations

import pytest

from server.profiles.memory_budget import budget_bytes, describe_size, parse_size

GIB = 2**30


def test_sizes_take_binary_and_decimal_units() -> None:
    assert parse_size("70GiB") == 70 * GIB
    assert parse_size(" 512 MiB ") == 512 * 2**20
    assert parse_size("1.5TB") == 1_500_000_000_000
    assert parse_size("100B") == 100
    with pytest.raises(ValueError, match="not a size with a unit"):
        parse_size("70")


def test_a_budget_is_a_size_a_fraction_or_the_pool() -> None:
    assert budget_bytes("8GiB", total_bytes=None, available_bytes=None) == 8 * GIB
    assert budget_bytes(0.5, total_bytes=80 * GIB, available_bytes=70 * GIB) == 40 * GIB
    # Default: what is available less the 10% reserve of the total, the KV-cache plan's pool.
    assert budget_bytes(None, total_bytes=80 * GIB, available_bytes=70 * GIB) == 62 * GIB
    assert budget_bytes(0.5, total_bytes=None, available_bytes=None) is None


def test_sizes_for_people() -> None:
    assert describe_size(3 * GIB // 2) == "1.5 GiB"
    assert describe_size(-2 * 2**20) == "-2.0 MiB"
    assert describe_size(12) == "12 B"
