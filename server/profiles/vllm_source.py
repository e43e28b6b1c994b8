"""What the profiles layer reads from vLLM's installed source, with ``ast`` and without importing vLLM.

Importing ``vllm.engine.arg_utils`` or vLLM's parser packages pulls in torch (seconds); ``turnout validate``
must start fast. Two kinds of facts are plain enough in vLLM's source to read in milliseconds: the annotated
fields of ``AsyncEngineArgs`` and the lazy-registration tables of the tool and reasoning parsers. This module
is the only one that knows where they are.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from server.profiles.registry import NameRegistry

__all__ = ["engine_arg_fields", "source_parser_registry", "vllm_package_dir"]

_ROOT_CLASS: Final = "AsyncEngineArgs"
_TOOL_TABLE: Final = ("tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER")
_REASONING_TABLE: Final = ("reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER")


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


@functools.cache
def engine_arg_fields() -> Mapping[str, str] | None:
    """Map every ``AsyncEngineArgs`` field (inherited ones included) to its annotation's source text.

    Returns:
        The fields, or ``None`` when vLLM is not installed or its source no longer has that shape.
    """
    tree = _parse(_source_file("engine/arg_utils.py"))
    if tree is None:
        return None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    fields: dict[str, str] = {}
    _collect(_ROOT_CLASS, classes, fields, set())
    return fields or None


def source_parser_registry() -> NameRegistry | None:
    """The tool and reasoning parser names of vLLM's lazy-registration tables, importing nothing.

    Returns:
        The registry, or ``None`` when vLLM is not installed or a table cannot be read.
    """
    tools = _table_keys(*_TOOL_TABLE)
    reasoning = _table_keys(*_REASONING_TABLE)
    return NameRegistry(tools, reasoning) if tools and reasoning else None


def _source_file(relative: str) -> Path | None:
    root = vllm_package_dir()
    path = root / relative if root else None
    return path if path is not None and path.is_file() else None


def _parse(path: Path | None) -> ast.Module | None:
    if path is None:
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


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


def _table_keys(relative: str, name: str) -> list[str]:
    tree = _parse(_source_file(relative))
    if tree is None:
        return []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(node.value, ast.Dict):
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if isinstance(target, ast.Name) and target.id == name:
            keys = [key.value for key in node.value.keys if isinstance(key, ast.Constant)]
            return [key for key in keys if isinstance(key, str)]
    return []
