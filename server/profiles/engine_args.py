"""Checking engine-argument values against ``AsyncEngineArgs``' annotations, and spelling hints for keys.

The field annotations come from vLLM's source (``vllm_source.engine_arg_fields``), never from importing vLLM.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection
from typing import Any, Final

from server.profiles.vllm_source import EngineArgField

__all__ = ["check_engine_arg", "check_engine_value", "did_you_mean", "suggest"]

_INT_TEXT: Final = re.compile(r"\s*[+-]?\d+\s*")
_BOOL_TEXT: Final = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off", "t", "f", "y", "n"})
_BOUND_CHECKS: Final[dict[str, Callable[[float, float], bool]]] = {
    "gt": lambda value, bound: value > bound,
    "ge": lambda value, bound: value >= bound,
    "lt": lambda value, bound: value < bound,
    "le": lambda value, bound: value <= bound,
}
_BOUND_SYMBOLS: Final = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def suggest(name: str, candidates: Collection[str]) -> list[str]:
    """The candidates closest to a misspelt ``name``, best first (at most three)."""
    return difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)


def did_you_mean(name: str, candidates: Collection[str]) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the closest candidates, or ``""`` when none is close."""
    hints = suggest(name, candidates)
    return "; did you mean " + " or ".join(repr(hint) for hint in hints) + "?" if hints else ""


def check_engine_arg(value: Any, annotation: str) -> str | None:
    """Check a value against a simple engine-arg annotation, as leniently as vLLM's pydantic configs do.

    Only ``int``, ``float``, ``bool`` and ``str`` (optionally ``| None``) are checked; anything richer is
    vLLM's to validate when it builds the engine. ``None`` always passes (many fields default to it).

    Returns:
        What the value must be (``"an integer"``), or ``None`` when it is acceptable.
    """
    kinds = {part.strip() for part in annotation.split("|")} - {"None"}
    if value is None or len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind == "int" and not _lax_int(value):
        return "an integer"
    if kind == "float" and not _lax_float(value):
        return "a number"
    if kind == "bool" and not _lax_bool(value):
        return "true or false"
    if kind == "str" and not isinstance(value, str):
        return "a string"
    return None


def _lax_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, str) and _INT_TEXT.fullmatch(value) is not None


def _lax_float(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return False


def _lax_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return value in (0, 1)
    return isinstance(value, str) and value.strip().lower() in _BOOL_TEXT


def check_engine_value(value: Any, field: EngineArgField) -> tuple[str, str] | None:
    """Check a value against what vLLM declares for the field: its type, its ``Literal`` choices, its bounds.

    Returns:
        ``(what it must be, where vLLM says so)``, e.g. ``("an integer >= -1", "ModelConfig.max_model_len:
        Field(ge=-1)")``, or ``None`` when the value is acceptable (``None`` always is).
    """
    declared = f"AsyncEngineArgs.{field.name} is {field.annotation}"
    expected = check_engine_arg(value, field.annotation)
    if expected is not None:
        return expected, declared
    if value is None:
        return None
    if field.choices is not None and not isinstance(value, (list, dict)) and value not in field.choices:
        return "one of " + ", ".join(repr(choice) for choice in field.choices), declared
    number = _as_number(value, field.annotation)
    if number is None or not field.bounds:
        return None
    if all(_BOUND_CHECKS[name](number, bound) for name, bound in field.bounds):
        return None
    kind = "an integer" if _kinds(field.annotation) == {"int"} else "a number"
    limits = " and ".join(f"{_BOUND_SYMBOLS[name]} {_show(bound)}" for name, bound in field.bounds)
    written = ", ".join(f"{name}={_show(bound)}" for name, bound in field.bounds)
    return f"{kind} {limits}", f"{field.config_field}: Field({written})"


def _kinds(annotation: str) -> set[str]:
    return {part.strip() for part in annotation.split("|")} - {"None"}


def _as_number(value: Any, annotation: str) -> float | None:
    """The value as a number when vLLM would read it as one (a numeric string only for a numeric field)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and _kinds(annotation) & {"int", "float"}:
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _show(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)
