"""The memory budget: sizes, fractions, the default, and which models fit in it together."""

from __future__ import annotations

import itertools
import random

import pytest

from server.profiles.footprint import Footprint
from server.profiles.memory_budget import budget_bytes, describe_size, most_resident, parse_size, residency_outlook

GIB = 2**30


def sized(name: str, size: int) -> Footprint:
    """A model of ``size`` bytes in all (weights only, for simple sums)."""
    return Footprint(
        model=name,
        weight_bytes=size,
        kv_cache_bytes=0,
        kv_source="need",
        overhead_bytes=0,
        kv_bytes_per_token=0,
        max_model_len=1,
        max_num_seqs=1,
    )


def unit(name: str, units: int) -> Footprint:
    """A model of ``units`` GiB in all."""
    return sized(name, units * GIB)


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


def test_the_most_models_that_fit_is_the_smallest_first_within_max_active() -> None:
    sizes = {"a": 3 * GIB, "b": 2 * GIB, "c": 2 * GIB}
    assert most_resident(sizes, 5 * GIB) == ["b", "c"]
    assert most_resident(sizes, 5 * GIB, max_active=1) == ["b"]
    assert most_resident(sizes, 7 * GIB) == ["b", "c", "a"]
    assert most_resident({"x": 1, "y": 1, "z": 1, "big": 4}, 5) == ["x", "y", "z"]  # though big and one fit too
    assert most_resident({"big": 9 * GIB}, 8 * GIB) == []


def test_no_set_that_fits_has_more_models_than_the_largest_sets_say() -> None:
    rng = random.Random(30)
    for _ in range(200):
        names = [f"m{i}" for i in range(rng.randint(1, 7))]
        sizes = {name: rng.randint(1, 9) for name in names}
        budget, cap = rng.randint(1, 20), rng.choice([None, 1, 2, 3])
        most = max(
            (
                len(combo)
                for n in range(len(names) + 1)
                for combo in itertools.combinations(names, n)
                if sum(sizes[m] for m in combo) <= budget and (cap is None or len(combo) <= cap)
            ),
        )
        assert len(most_resident(sizes, budget, max_active=cap)) == most, (sizes, budget, cap)
        outlook = residency_outlook([sized(n, s) for n, s in sizes.items()], budget, max_active=cap)
        assert max((len(combo) for combo in outlook.largest_sets), default=0) == most


def test_sizes_for_people() -> None:
    assert describe_size(3 * GIB // 2) == "1.5 GiB"
    assert describe_size(-2 * 2**20) == "-2.0 MiB"
    assert describe_size(12) == "12 B"
