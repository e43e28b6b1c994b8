"""Import rules: vLLM's frontend is reached only through the adapter; the frontend stays framework-free."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fresh_python import fresh_python

SERVER = Path(__file__).resolve().parents[2] / "server"
ADAPTER = SERVER / "frontend" / "vllm_adapter.py"
#: The adapter and the modules it is split into: the other serving routes, the call-to-result mapping, the flags,
#: the Responses API's tool server, the speech routes.
ADAPTERS = tuple(
    SERVER / "frontend" / name
    for name in (
        "vllm_adapter.py",
        "vllm_operations.py",
        "vllm_calls.py",
        "vllm_frontend_args.py",
        "vllm_tool_server.py",
        "vllm_speech.py",
    )
)
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
    assert all(offenders([adapter], VLLM_FRONTEND) != [] for adapter in ADAPTERS)  # the scan does see imports


def test_the_frontend_imports_no_web_framework() -> None:
    assert offenders(sorted((SERVER / "frontend").rglob("*.py")), WEB_FRAMEWORKS) == []


@pytest.mark.parametrize("path", sorted((SERVER / "frontend").glob("*.py")), ids=lambda path: path.name)
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
