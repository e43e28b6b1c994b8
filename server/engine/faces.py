"""The rooms' faces: each room (``switching``, ``admission``, ``residency``, ``supervision``, ``runtime``,
``strategies``) hands out its names through its ``__init__``, and the other rooms import only that.

A face names what it hands out once, in its ``TYPE_CHECKING`` block (what mypy and a reader see); at run time
:func:`lazy_face` turns that block into the face's ``__getattr__``, so a name is imported from the module that holds
it on first use. The faces import nothing eagerly: the rooms depend on one another (the device reads the scheduler's
view of a switch, the scheduler's gate waits on the device), and a lazy face keeps the modules' own import graph,
which has no circles (``tests/engine/test_engine_room.py``), the only one Python walks.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["face_names", "lazy_face"]


def face_names(face_file: str | Path) -> dict[str, str]:
    """Each name a face's ``TYPE_CHECKING`` block imports, and the module it comes from."""
    tree = ast.parse(Path(face_file).read_text(encoding="utf-8"), filename=str(face_file))
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    names.update((alias.asname or alias.name, statement.module) for alias in statement.names)
    return names


def lazy_face(package: str, face_file: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``'s face: each name of its ``TYPE_CHECKING`` block, looked up on first use."""
    where = face_names(face_file)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = where[name]
        # A module of the room the face hands out itself (``from server.engine.residency import policy``).
        value = (
            importlib.import_module(f"{package}.{name}")
            if module == package
            else getattr(importlib.import_module(module), name)
        )
        setattr(sys.modules[package], name, value)  # the next lookup finds it without this function
        return value

    return __getattr__
