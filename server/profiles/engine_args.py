"""The field names of vLLM's ``AsyncEngineArgs``, read from vLLM's source without importing it.

Importing ``vllm.engine.arg_utils`` pulls in torch (seconds); ``turnout validate`` must start fast. The
dataclass fields are plain annotated assignments, so ``ast`` reads them in milliseconds.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["check_engine_arg", "did_you_mean", "engine_arg_fields", "suggest", "vllm_package_dir"]

_ROOT_CLASS: Final = "AsyncEngineArgs"
_INT_TEXT: Final = re.compile(r"\s*[+-]?\d+\s*")
_BOOL_TEXT: Final = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off", "t", "f", "y", "n"})


@functools.cache
def engine_arg_fields() -> Mapping[str, str] | None:
    """Map every ``AsyncEngineArgs`` field (inherited ones included) to its annotation's source text.

    Returns:
        The fields, or ``None`` when vLLM is not installed or its source no longer has that shape.
    """
    source = _arg_utils_path()
    if source is None:
        return None
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    fields: dict[str, str] = {}
    _collect(_ROOT_CLASS, classes, fields, set())
    return fields or None


def vllm_package_dir() -> Path | None:
    """vLLM's installed package folder, found without importing vLLM (None when it is not installed)."""
    try:
        # find_spec of the top-level package does not import it; find_spec of a submodule would.
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _arg_utils_path() -> Path | None:
    root = vllm_package_dir()
    path = root / "engine" / "arg_utils.py" if root else None
    return path if path is not None and path.is_file() else None


def _collect(name: str, classes: dict[str, ast.ClassDef], fields: dict[str, str], seen: set[str]) -> None:
    cls = classes.get(name)
    if cls is None or name in seen:
        return
    seen.add(name)
    for base in cls.bases:  # base fields first, as dataclasses order them
        if isinstance(base, ast.Name):
            _collect(base.id, classes, fields, seen)
    for statement in cls.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            annotation = ast.unparse(statement.annotation)
            if "ClassVar" not in annotation:
                fields[statement.target.id] = annotation


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
