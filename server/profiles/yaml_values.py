"""Turning ruamel's round-trip values into plain Python values that ``msgspec.convert`` and vLLM accept.

ruamel hands back ``ScalarFloat``, ``ScalarInt``, ``CommentedMap`` and friends; msgspec rejects some of them
and vLLM should never see them. The conversion also enforces what a profile may contain: no custom tags, no
sets or binary values, and no alias bombs.
"""

from __future__ import annotations

import datetime
from typing import Any, Final

from ruamel.yaml.comments import CommentedMap, CommentedSeq, CommentedSet, TaggedScalar
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.scalarfloat import ScalarFloat
from ruamel.yaml.scalarint import ScalarInt

from server.profiles.check_context import Collector, Pos
from server.profiles.yaml_tree import item_pos, key_pos, value_pos

__all__ = ["MAX_DEPTH", "MAX_VALUES", "plain_text", "quiet_plain", "reject_tag", "to_plain"]

#: More values than any real profile has; past this an alias is expanding without bound.
MAX_VALUES: Final = 100_000
#: Deeper than any real profile nests; the limit keeps the recursion far from Python's.
MAX_DEPTH: Final = 64
_STR_TAG: Final = "tag:yaml.org,2002:str"

# vLLM-Gaudi reads profiles with PyYAML, which follows YAML 1.1: these *unquoted* words are booleans there.
# ruamel follows YAML 1.2 (only true/false), so we map them back; quoted strings stay strings.
_YAML11_BOOLEANS: Final = {
    **dict.fromkeys(("yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "off", "Off", "OFF"), False),
}


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_VALUES
        self.exceeded = False
        self.too_deep = False


def to_plain(value: Any, pos: Pos, report: Collector) -> Any:
    """Convert one round-trip value (and everything under it) to plain Python.

    Args:
        value: A value from the round-trip tree.
        pos: Where ``value`` starts (for errors about the value itself).
        report: Where problems go; a bad part becomes ``None`` so that checking continues.

    Returns:
        The value as ``dict``/``list``/``str``/``int``/``float``/``bool``/``None`` (dates stay dates).
    """
    return _convert(value, pos, report, _Budget(), set())


def _convert(value: Any, pos: Pos, report: Collector, budget: _Budget, active: set[int]) -> Any:
    budget.left -= 1
    if budget.left < 0:
        if not budget.exceeded:
            budget.exceeded = True
            report.error(pos, f"the profile expands to more than {MAX_VALUES} values (an alias loop?)")
        return None
    if value is None or type(value) in (bool, int, float):
        return value
    if isinstance(value, ScalarBoolean):  # an anchored boolean; it subclasses int, so test it first
        return bool(value)
    if isinstance(value, ScalarInt):
        return int(value)
    if isinstance(value, ScalarFloat):
        return float(value)
    if isinstance(value, str):
        if type(value) is str and value in _YAML11_BOOLEANS:
            return _YAML11_BOOLEANS[value]
        return plain_text(str(value), pos, report)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value
    if isinstance(value, TaggedScalar) and _tag_name(value) == _STR_TAG:  # an explicit !!str
        return str(value.value)
    if isinstance(value, TaggedScalar) or _custom_tag(value):
        report.error(pos, f"unsupported YAML tag {_tag_name(value)}; profiles hold plain YAML values only")
        return None
    if isinstance(value, CommentedSet) or not isinstance(value, (CommentedMap, CommentedSeq)):
        report.error(pos, f"unsupported YAML value of type {type(value).__name__}")
        return None
    if len(active) >= MAX_DEPTH:
        if not budget.too_deep:
            budget.too_deep = True
            report.error(pos, f"the profile nests deeper than {MAX_DEPTH} levels")
        return None
    if id(value) in active:
        report.error(pos, "a YAML alias refers to a node that contains it; recursive values are not supported")
        return None
    active.add(id(value))
    try:
        if isinstance(value, CommentedMap):
            return _convert_map(value, report, budget, active)
        return [_convert(item, item_pos(value, index), report, budget, active) for index, item in enumerate(value)]
    finally:
        active.discard(id(value))


def _convert_map(mapping: CommentedMap, report: Collector, budget: _Budget, active: set[int]) -> dict[Any, Any]:
    plain: dict[Any, Any] = {}
    for key, item in mapping.items():
        if isinstance(key, str):
            plain_key: Any = plain_text(str(key), key_pos(mapping, key), report)
        elif key is None or isinstance(key, (bool, int, float)):
            plain_key = _convert(key, value_pos(mapping, key), report, budget, active)
        else:
            report.error(value_pos(mapping, key), "a mapping key must be a plain value, not a list or mapping")
            continue
        plain[plain_key] = _convert(item, value_pos(mapping, key), report, budget, active)
    return plain


def plain_text(text: str, pos: Pos, report: Collector) -> str | None:
    """Join surrogate pairs written as escapes ("\\ud83d\\ude00", as JSON writes them); reject lone ones."""
    if not any("\ud800" <= char <= "\udfff" for char in text):
        return text
    try:
        return text.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        report.error(pos, "a string holds an unpaired surrogate escape (\\ud800-\\udfff), which is not text")
        return None


def reject_tag(node: Any, pos: Pos, report: Collector) -> bool:
    """Report a custom tag on a structural node (the profile, ``models``, a model, a section).

    Returns:
        Whether the node carries one.
    """
    if _custom_tag(node):
        report.error(pos, f"unsupported YAML tag {_tag_name(node)}; profiles hold plain YAML values only")
        return True
    return False


def _custom_tag(value: Any) -> bool:
    tag = getattr(value, "tag", None)
    return getattr(tag, "value", None) is not None


def _tag_name(value: Any) -> str:
    tag = getattr(value, "tag", None)
    return str(getattr(tag, "value", tag))


def quiet_plain(value: Any) -> Any:
    """Like ``to_plain`` but silent, for describing a value in a message; an unusable value stays as is."""
    collector = Collector("")
    plain = to_plain(value, (1, 1), collector)
    return value if collector.error_count else plain
