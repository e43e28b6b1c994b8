"""The memory budget: sizes, fractions, the default, and which models fit in it together."""

from __future__ import annotations

import pytest

from server.profiles.footprint import Footprint
from server.profiles.memory_budget import budget_bytes, describe_size, parse_size, residency_outlook

GIB = 2**30


def unit(name: str, units: int) -> Footprint:
    """A model of ``units`` GiB in all (weights only, for simple sums)."""
    return Footprint(
        model=name,
        weight_bytes=units * GIB,
        kv_cache_bytes=0,
        kv_source="need",
        overhead_bytes=0,
        kv_bytes_per_token=0,
        max_model_len=1,
        max_num_seqs=1,
    )


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


def test_the_issues_card_holds_the_three_small_models_together() -> None:
    models = [unit("40", 40), unit("30", 30), unit("8a", 8), unit("8b", 8)]
    outlook = residency_outlook(models, 80 * GIB)
    assert outlook.largest_sets[0] == ["40", "30", "8a"]  # 78 GiB: the largest sets first, heaviest first
    assert ["30", "8a", "8b"] in outlook.largest_sets and ["40", "8a", "8b"] in outlook.largest_sets
    assert all(sum(int(n.rstrip("ab")) for n in combo) <= 80 for combo in outlook.largest_sets)
    assert outlook.never_fit == []


def test_sets_are_maximal_and_max_active_caps_them() -> None:
    models = [unit("a", 3), unit("b", 2), unit("c", 2)]
    assert residency_outlook(models, 5 * GIB).largest_sets == [["a", "b"], ["a", "c"], ["b", "c"]]
    assert residency_outlook(models, 7 * GIB, max_active=2).largest_sets == [["a", "b"], ["a", "c"], ["b", "c"]]
    assert residency_outlook(models, 7 * GIB).largest_sets == [["a", "b", "c"]]


def test_a_model_larger_than_the_budget_never_fits() -> None:
    outlook = residency_outlook([unit("big", 9), unit("small", 1)], 8 * GIB)
    assert outlook.never_fit == ["big"] and outlook.largest_sets == [["small"]]


def test_sizes_for_people() -> None:
    assert describe_size(3 * GIB // 2) == "1.5 GiB"
    assert describe_size(-2 * 2**20) == "-2.0 MiB"
    assert describe_size(12) == "12 B"
