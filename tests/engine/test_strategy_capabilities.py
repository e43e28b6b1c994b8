"""Strategies declare what they can do; callers read the declaration, never a strategy's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from server.engine.strategies import STRATEGIES, capabilities_of, choose_strategy
from server.engine.types.strategy import ResidentLoader

SERVER = Path(__file__).resolve().parents[2] / "server"
STRATEGY_FOLDER = SERVER / "engine" / "strategies"


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_strategy_that_loads_without_activating_implements_it_and_only_then(name: str) -> None:
    strategy = STRATEGIES[name]
    assert strategy.name == name
    assert capabilities_of(name).loads_without_activating == hasattr(strategy, "load_resident")
    assert capabilities_of(name).loads_without_activating == issubclass(strategy, ResidentLoader)


def test_what_the_strategies_declare() -> None:
    several = {name for name in STRATEGIES if capabilities_of(name).serves_several}
    holding = {name for name in STRATEGIES if capabilities_of(name).holds_left_model}
    assert several == {"keep"} and holding == {"keep", "sleep", "stash"}
    assert {name for name in STRATEGIES if capabilities_of(name).swaps_in_place} == {"reconfigure"}
    # Serving several models means holding the ones left; a memory budget applies only where several are held.
    assert all(capabilities_of(name).holds_left_model for name in several)
    assert all(capabilities_of(name).serves_several for name in STRATEGIES if capabilities_of(name).budgets_bytes)
    assert choose_strategy("reconfigure", device="cpu", stash_available=False).in_place == "required"
    assert choose_strategy("stop", device="cpu", stash_available=False).in_place == "no"


def _name_comparisons(path: Path, *, named: str = "strateg") -> list[str]:
    """Comparisons of a literal strategy name (``x == "keep"``, ``x in ("stop", ...)``) with an expression whose
    source says ``named`` (``finish_reason == "stop"`` is no strategy's)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Compare):
            continue
        literals = [
            item.value
            for side in [node.left, *node.comparators]
            for item in (side.elts if isinstance(side, (ast.Tuple, ast.Set, ast.List)) else [side])
            if isinstance(item, ast.Constant) and isinstance(item.value, str)
        ]
        others = [ast.unparse(side) for side in [node.left, *node.comparators] if not isinstance(side, ast.Constant)]
        if any(value in STRATEGIES for value in literals) and any(named in other for other in others):
            found.append(f"{path.relative_to(SERVER.parent)}:{node.lineno}")
    return found


def test_no_caller_outside_the_strategies_compares_a_strategys_name() -> None:
    files = [path for path in sorted(SERVER.rglob("*.py")) if STRATEGY_FOLDER not in path.parents]
    assert [hit for path in files for hit in _name_comparisons(path)] == []
    # The scan does see comparisons: the selection inside the strategies compares names (its registration).
    assert _name_comparisons(STRATEGY_FOLDER / "select.py", named="") != []
