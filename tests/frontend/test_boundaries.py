"""Import rules: vLLM's frontend is reached only through the adapter; the frontend stays framework-free."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fresh_python import fresh_python

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "server"
#: The adapter package: its modules are the only ones that import vLLM's frontend.
PACKAGE = SERVER / "frontend" / "vllm_adapter"
PACKAGE_NAME = "server.frontend.vllm_adapter"
#: Adapter modules still outside the package, each until it moves in (relative to ``server/frontend/``).
OUTSIDE_THE_PACKAGE: tuple[str, ...] = ()
ADAPTERS = (*sorted(PACKAGE.glob("*.py")), *(SERVER / "frontend" / name for name in OUTSIDE_THE_PACKAGE))
#: The package's own modules (its face, ``__init__``, is the one import path for everything else).
SUBMODULES = frozenset(f"{PACKAGE_NAME}.{path.stem}" for path in PACKAGE.glob("*.py") if path.stem != "__init__")
#: Where Turnout's code lives: every file here imports the adapter through its face.
CODE = tuple(REPO / folder for folder in ("server", "tests", "benchmarks", "scripts"))
#: Unit tests of one module's internals (a cache to reset, a private helper), and the one module each reads.
WHITE_BOX_TESTS = {
    "tests/frontend/test_tool_server.py": f"{PACKAGE_NAME}._tool_server",
    "tests/frontend/test_lora_request_names.py": f"{PACKAGE_NAME}._calls",
    "tests/frontend/test_vllm_moved.py": f"{PACKAGE_NAME}._moved",
}
VLLM_FRONTEND = ("vllm.entrypoints", "vllm.tool_parsers", "vllm.reasoning", "vllm.renderers", "vllm.parser")
WEB_FRAMEWORKS = ("litestar", "fastapi", "starlette")


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            # `from vllm import entrypoints` reaches the same modules.
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def offenders(files: list[Path], prefixes: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(SERVER.parent)}: {module}"
        for path in files
        for module in sorted(imported_modules(path))
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)
    ]


def test_only_the_adapter_imports_vllms_frontend() -> None:
    # No exception: the in-place swap's renderer rebuild gets the adapter's build_renderer from the CLI.
    files = [path for path in sorted(SERVER.rglob("*.py")) if path not in ADAPTERS]
    assert offenders(files, VLLM_FRONTEND) == []
    # The scan does see imports: every module but the face, the table of moved names (which imports them by
    # name, from wherever the installed vLLM has them), `_calls` (whose frontend names all moved) and `_schemas`
    # (which reads the request models from the table of operations) imports vLLM's frontend.
    by_name = ("__init__.py", "_moved.py", "_calls.py", "_schemas.py")
    assert all(offenders([adapter], VLLM_FRONTEND) != [] for adapter in ADAPTERS if adapter.name not in by_name)


def test_nothing_outside_the_adapter_imports_its_modules() -> None:
    files = [path for folder in CODE for path in sorted(folder.rglob("*.py")) if PACKAGE not in path.parents]
    found = {
        str(path.relative_to(REPO)): sorted(imported_modules(path) & SUBMODULES)
        for path in files
        if imported_modules(path) & SUBMODULES
    }
    assert found == {name: [module] for name, module in WHITE_BOX_TESTS.items()}  # each exception is still needed


def test_the_frontend_imports_no_web_framework() -> None:
    assert offenders(sorted((SERVER / "frontend").rglob("*.py")), WEB_FRAMEWORKS) == []


@pytest.mark.parametrize(
    "path", sorted((SERVER / "frontend").rglob("*.py")), ids=lambda path: str(path.relative_to(SERVER / "frontend"))
)
def test_every_frontend_module_declares_all(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert "__all__" in names


def test_importing_the_package_does_not_import_vllm() -> None:
    code = "import sys, server.frontend; print('vllm' in sys.modules)"
    assert fresh_python(code) == "False"
