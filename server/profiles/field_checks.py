"""Checking one value against one Struct field's type, with a message a person can act on.

msgspec stops at the first error of a whole object, so profiles are checked field by field; each field's
type (constraints included) still comes from the Struct, which stays the single source of truth.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Final

import msgspec
import msgspec.inspect

from server.profiles.schema import MEMORY_SIZE_PATTERN

__all__ = ["check_value", "describe_type", "describe_value", "field_types"]

_BASE_NAMES: Final[dict[type[msgspec.inspect.Type], str]] = {
    msgspec.inspect.BoolType: "true or false",
    msgspec.inspect.IntType: "an integer",
    msgspec.inspect.FloatType: "a number",
    msgspec.inspect.StrType: "a string",
    msgspec.inspect.DictType: "dict",
    msgspec.inspect.ListType: "list",
}


def field_types(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """Map each field name of ``struct`` to its (annotated) type."""
    return {info.name: info.type for info in msgspec.structs.fields(struct)}


def check_value(value: Any, typ: Any) -> tuple[Any, str | None]:
    """Convert ``value`` to ``typ``.

    Returns:
        ``(converted, None)`` on success, else ``(None, "must be <type>, got <value>")``.
    """
    try:
        return msgspec.convert(value, typ), None
    except msgspec.ValidationError:
        return None, f"must be {describe_type(typ)}, got {describe_value(value)}"


#: Words for the string patterns of the schema, instead of their regular expressions.
_PATTERN_WORDS: Final = {MEMORY_SIZE_PATTERN: "a size with its unit (such as 70GiB or 512MiB)"}


def describe_type(typ: Any) -> str:
    """Say in words what ``typ`` accepts: ``an integer >= 1``, ``one of 'auto', 'manual'`` (msgspec sorts literals)."""
    return _describe(msgspec.inspect.type_info(typ))


def _describe(info: msgspec.inspect.Type) -> str:
    if isinstance(info, msgspec.inspect.UnionType):
        # None is always allowed where a field is optional; saying so on every message is noise.
        return " or ".join(_describe(arg) for arg in info.types if not isinstance(arg, msgspec.inspect.NoneType))
    if isinstance(info, msgspec.inspect.LiteralType):
        return "one of " + ", ".join(describe_value(choice) for choice in info.values)
    if isinstance(info, msgspec.inspect.StructType):
        return info.cls.__name__
    if isinstance(info, msgspec.inspect.ListType) and isinstance(info.item_type, msgspec.inspect.StrType):
        return "a list of strings"
    pattern = getattr(info, "pattern", None)
    if pattern in _PATTERN_WORDS:
        return _PATTERN_WORDS[pattern]
    text = _BASE_NAMES.get(type(info), type(info).__name__.removesuffix("Type").lower())
    bounds = [
        f"{op} {bound}"
        for op, attr in ((">", "gt"), (">=", "ge"), ("<", "lt"), ("<=", "le"))
        if (bound := getattr(info, attr, None)) is not None
    ]
    return " and ".join([f"{text} {bounds[0]}", *bounds[1:]]) if bounds else text


def describe_value(value: Any) -> str:
    """Show a value the way the user wrote it: ``null``, ``true``, ``'text'``, ``3``, ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, AbstractSet):
        return "a set"
    if isinstance(value, bytes):
        return "binary data"
    if isinstance(value, datetime.date):
        return "a date"
    return f"a value of type {type(value).__name__}"
