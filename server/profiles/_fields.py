"""Checking one value against one Struct field's type, with a message a person can act on.

msgspec stops at the first error of a whole object, so profiles are checked field by field; each field's
type (constraints included) still comes from the Struct, which stays the single source of truth.
"""

from __future__ import annotations

import datetime
import types
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

__all__ = ["check_value", "describe_type", "describe_value", "field_types"]

_BASE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


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


def describe_type(typ: Any) -> str:
    """Say in words what ``typ`` accepts: ``an integer >= 1``, ``one of 'manual', 'auto'``."""
    origin = get_origin(typ)
    if origin is Annotated:
        base, *metas = get_args(typ)
        text = describe_type(base)
        for meta in metas:
            if isinstance(meta, msgspec.Meta):
                for op, bound in ((">", meta.gt), (">=", meta.ge), ("<", meta.lt), ("<=", meta.le)):
                    if bound is not None:
                        text += f" {op} {bound}"
        return text
    if origin is Literal:
        return "one of " + ", ".join(describe_value(choice) for choice in get_args(typ))
    if origin in (Union, types.UnionType):
        # None is always allowed where a field is optional; saying so on every message is noise.
        return " or ".join(describe_type(arg) for arg in get_args(typ) if arg is not type(None))
    return _BASE_NAMES.get(typ, getattr(typ, "__name__", str(typ)))


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
