"""What the profiles layer reads from vLLM's installed source, with ``ast`` and without importing vLLM.

Importing ``vllm.engine.arg_utils`` or vLLM's parser packages pulls in torch (seconds); ``turnout validate``
must start fast. Two kinds of facts are plain enough in vLLM's source to read in milliseconds: the annotated
fields of ``AsyncEngineArgs`` and the lazy-registration tables of the tool and reasoning parsers. This module
is the only one that knows where they are.

A field's type and allowed values come from where vLLM declares them: its annotation on ``AsyncEngineArgs``
(``Literal`` aliases followed to their values), and the pydantic bounds (``Field(ge=-1)``) of the config field
it feeds, found through its default (``= ModelConfig.max_model_len``, ``get_field(CacheConfig, ...)``) or the
config constructor that takes it (``SchedulerConfig(max_num_seqs=self.max_num_seqs)``). Config modules are
read only when a profile uses one of their fields. ``tests/profiles/test_engine_args.py`` holds the table to
the live ``AsyncEngineArgs`` and its pydantic metadata.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import msgspec

from server.profiles.registry import NameRegistry

__all__ = [
    "EngineArgField",
    "engine_arg_fields",
    "source_flag_names",
    "source_parser_registry",
    "vllm_package_dir",
]

_ROOT_CLASS: Final = "AsyncEngineArgs"
_ARG_UTILS: Final = "engine/arg_utils.py"
_BOUND_NAMES: Final = ("gt", "ge", "lt", "le")
#: How many aliases or re-exports deep a name is followed (vLLM uses two or three).
_MAX_DEPTH: Final = 8
Choice = str | int | float | bool
_TOOL_TABLE: Final = ("tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER")
_REASONING_TABLE: Final = ("reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER")
_FRONTEND_ARGS: Final = ("entrypoints/launchers/cli_args.py", ("BaseFrontendArgs", "FrontendArgs"))


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


class EngineArgField(msgspec.Struct, frozen=True, kw_only=True):
    """One field of vLLM's ``AsyncEngineArgs`` as vLLM's source declares it.

    Attributes:
        name: The field's name (the profile key).
        annotation: Its annotation on ``AsyncEngineArgs``, as written (``int``, ``ModelDType``, ``int | None``).
        config_field: The config field it feeds (``ModelConfig.max_model_len``), when that can be seen.
        bounds: That config field's pydantic bounds, as ``(name, value)`` pairs (``(("ge", -1),)``).
        choices: The values a ``Literal``-only annotation allows; ``None`` for any other annotation.
    """

    name: str
    annotation: str
    config_field: str | None = None
    bounds: tuple[tuple[str, float], ...] = ()
    choices: tuple[Choice, ...] | None = None


class _FieldTable(Mapping[str, EngineArgField]):
    """``AsyncEngineArgs``' fields by name; each field's details are read when it is first looked up."""

    def __init__(self, arg_utils: Path, tree: ast.Module) -> None:
        self._path = arg_utils
        classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        self._statements: dict[str, ast.AnnAssign] = {}
        _collect(_ROOT_CLASS, classes, self._statements, set())
        self._routes = _constructor_routes(classes.get("EngineArgs"))
        self._resolved: dict[str, EngineArgField] = {}

    def __getitem__(self, name: str) -> EngineArgField:
        if name not in self._resolved:
            self._resolved[name] = self._resolve(name)
        return self._resolved[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._statements)

    def __len__(self) -> int:
        return len(self._statements)

    def __contains__(self, name: object) -> bool:
        return name in self._statements

    def _resolve(self, name: str) -> EngineArgField:
        statement = self._statements[name]
        target = _default_source(statement.value) or self._routes.get(name)
        found: list[Choice] = []
        only_literals = _literal_values(statement.annotation, self._path, found, 0)
        return EngineArgField(
            name=name,
            annotation=ast.unparse(statement.annotation),
            config_field=".".join(target) if target else None,
            bounds=self._bounds(*target) if target else (),
            choices=tuple(found) if only_literals and found else None,
        )

    def _bounds(self, class_name: str, field: str) -> tuple[tuple[str, float], ...]:
        found = _definition(class_name, self._path, 0)
        cls = found[0] if found is not None and isinstance(found[0], ast.ClassDef) else None
        for statement in cls.body if cls is not None else []:
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and statement.target.id == field
                and isinstance(statement.value, ast.Call)
                and _name(statement.value.func) == "Field"
            ):
                return tuple(
                    (keyword.arg, value)
                    for keyword in statement.value.keywords
                    if keyword.arg in _BOUND_NAMES and (value := _number(keyword.value)) is not None
                )
        return ()


@functools.cache
def engine_arg_fields() -> Mapping[str, EngineArgField] | None:
    """Every ``AsyncEngineArgs`` field (inherited ones included), with its type, bounds and choices.

    Returns:
        The fields, or ``None`` when vLLM is not installed or its source no longer has that shape.
    """
    path = _source_file(_ARG_UTILS)
    tree = _parse(path)
    if path is None or tree is None:
        return None
    table = _FieldTable(path, tree)
    return table if len(table) else None


def source_parser_registry() -> NameRegistry | None:
    """The tool and reasoning parser names of vLLM's lazy-registration tables, importing nothing.

    Returns:
        The registry, or ``None`` when vLLM is not installed or a table cannot be read.
    """
    tools = _table_keys(*_TOOL_TABLE)
    reasoning = _table_keys(*_REASONING_TABLE)
    return NameRegistry(tools, reasoning) if tools and reasoning else None


@functools.cache
def source_flag_names() -> frozenset[str] | None:
    """Every long flag of ``vllm serve``'s engine and frontend parsers (``--max-model-len``), importing nothing.

    A field of ``AsyncEngineArgs`` or ``FrontendArgs`` is the flag ``--field-name``; the ``--`` strings written in
    those files (``add_argument`` aliases) are flags too. ``tests/profiles/test_vllm_flag_names.py`` holds the set
    to vLLM's live parsers. ``turnout serve`` refuses an unknown flag with it before vLLM is imported (seconds).

    Returns:
        The flags, or ``None`` when vLLM is not installed or its source no longer has that shape.
    """
    engine = engine_arg_fields()
    frontend_path, frontend_classes = _FRONTEND_ARGS
    trees = [_parse(_source_file(_ARG_UTILS)), _parse(_source_file(frontend_path))]
    if engine is None or trees[1] is None:
        return None
    classes = {node.name: node for node in trees[1].body if isinstance(node, ast.ClassDef)}
    frontend: dict[str, ast.AnnAssign] = {}
    for name in frontend_classes:
        _collect(name, classes, frontend, set())
    if not frontend:
        return None
    names = {"--" + name.replace("_", "-") for name in [*engine, *frontend]}
    for tree in trees:
        for node in ast.walk(tree) if tree is not None else []:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--"):
                names.add(node.value)
    return frozenset(names)


def _source_file(relative: str) -> Path | None:
    root = vllm_package_dir()
    path = root / relative if root else None
    return path if path is not None and path.is_file() else None


@functools.cache
def _parse(path: Path | None) -> ast.Module | None:
    if path is None:
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _collect(name: str, classes: dict[str, ast.ClassDef], fields: dict[str, ast.AnnAssign], seen: set[str]) -> None:
    cls = classes.get(name)
    if cls is None or name in seen:
        return
    seen.add(name)
    for base in cls.bases:  # base fields first, as dataclasses order them
        if isinstance(base, ast.Name):
            _collect(base.id, classes, fields, seen)
    for statement in cls.body:
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        if "ClassVar" not in ast.unparse(statement.annotation):
            fields[statement.target.id] = statement


def _default_source(value: ast.expr | None) -> tuple[str, str] | None:
    """The config field a default mirrors: ``ModelConfig.max_model_len`` or ``get_field(CacheConfig, "x")``."""
    # vLLM names its config classes *Config; an enum member (MambaBackendEnum.AUTO) is no config field.
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id.endswith("Config"):
        return value.value.id, value.attr
    if isinstance(value, ast.Call) and _name(value.func) == "get_field" and len(value.args) == 2:
        cls, field = value.args
        if isinstance(cls, ast.Name) and isinstance(field, ast.Constant) and isinstance(field.value, str):
            return cls.id, field.value
    return None


def _constructor_routes(cls: ast.ClassDef | None) -> dict[str, tuple[str, str]]:
    """``SchedulerConfig(max_num_seqs=self.max_num_seqs)`` in ``EngineArgs``' methods: field to config field."""
    routes: dict[str, tuple[str, str]] = {}
    for node in ast.walk(cls) if cls is not None else []:
        callee = _name(node.func) if isinstance(node, ast.Call) else None
        if not isinstance(node, ast.Call) or callee is None or not callee.endswith("Config"):
            continue
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg and isinstance(value, ast.Attribute) and _name(value.value) == "self":
                routes.setdefault(value.attr, (callee, keyword.arg))
    return routes


def _literal_values(node: ast.expr, where: Path, found: list[Choice], depth: int, *, in_literal: bool = False) -> bool:
    """Collect what a ``Literal``-only annotation allows (aliases followed); False when it allows more."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _literal_values(node.left, where, found, depth, in_literal=in_literal) and _literal_values(
            node.right, where, found, depth, in_literal=in_literal
        )
    if isinstance(node, ast.Constant) and node.value is None:
        return True
    if isinstance(node, ast.Constant) and in_literal:
        if isinstance(node.value, (str, int, float)):  # bool is an int
            found.append(node.value)
            return True
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation: read what it says
        try:
            quoted = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
        return _literal_values(quoted, where, found, depth + 1)
    if isinstance(node, ast.Subscript) and _name(node.value) == "Literal":
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return all(_literal_values(item, where, found, depth, in_literal=True) for item in items)
    if isinstance(node, ast.Name):
        definition = _definition(node.id, where, 0)
        if definition is not None and isinstance(definition[0], ast.expr):
            return _literal_values(definition[0], definition[1], found, depth + 1, in_literal=in_literal)
    return False


def _definition(name: str, where: Path, depth: int) -> tuple[ast.AST, Path] | None:
    """Where ``name`` is defined (a class, or an alias's value), following ``from vllm... import`` lines."""
    tree = _parse(where)
    if tree is None or depth > _MAX_DEPTH:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, where
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                return node.value, where
    source = _vllm_imports(where).get(name)
    return _definition(name, source, depth + 1) if source is not None else None


@functools.cache
def _vllm_imports(path: Path) -> dict[str, Path]:
    """The names ``path`` imports from vLLM's own modules, and the file each comes from."""
    root = vllm_package_dir()
    tree = _parse(path)
    found: dict[str, Path] = {}
    for node in tree.body if tree is not None and root is not None else []:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vllm."):
            base = root.joinpath(*node.module.split(".")[1:])  # type: ignore[union-attr]
            source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
            for alias in node.names:
                found.setdefault(alias.asname or alias.name, source)
    return found


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _number(node: ast.expr) -> float | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return -inner if inner is not None else None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


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
