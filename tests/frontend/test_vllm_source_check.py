"""``scripts/vllm_source_check.py``, which CI runs on the vLLM 0.26.0 and 0.33.0 wheels, finds what would break.

The installed (main) vLLM's sources stand in for a wheel; a shadow of them removes a name or changes a signature.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import vllm

REPO = Path(__file__).resolve().parents[2]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_source_check", REPO / "scripts" / "vllm_source_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check_script = _load_script()
MAIN = check_script.Tree(Path(vllm.__file__).parents[1], vllm.__version__)
#: vLLM 0.32's OnlineRenderer.__init__, less ``tool_strict_level`` (as 0.26 to 0.31 have it).
OLD_RENDERER = """
class OnlineRenderer:
    def __init__(self, model_config, renderer, *, request_logger=None, chat_template=None,
                 chat_template_content_format="auto", trust_request_chat_template=False,
                 trust_request_mm_kwargs=False, enable_auto_tools=False,
                 exclude_tools_when_tool_choice_none=False, tool_parser=None, reasoning_parser=None,
                 default_chat_template_kwargs=None, log_error_stack=False): ...
"""


@dataclass(frozen=True)
class ShadowTree(check_script.Tree):  # type: ignore[misc,name-defined]
    """The main vLLM's sources, with some names removed and some definitions replaced."""

    removed: frozenset[tuple[str, str]] = frozenset()
    replaced: dict[str, str] = field(default_factory=dict)

    def defines(self, module: str, name: str) -> bool:
        return (module, name) not in self.removed and super().defines(module, name)

    def definition(self, module: str, name: str, depth: int = 0) -> Any:
        if name in self.replaced:
            return ast.parse(self.replaced[name]).body[0]
        return super().definition(module, name, depth)


def test_the_main_vllm_passes() -> None:
    assert check_script.check(MAIN, MAIN) == []


def test_a_name_the_adapter_imports_that_the_wheel_lacks_is_reported() -> None:
    removed = frozenset({("vllm.entrypoints.mcp.tool_server", "MCPToolServer")})
    assert check_script.check(ShadowTree(MAIN.root, "0.28.0", removed=removed), MAIN) == [
        "server/frontend/vllm_adapter/_tool_server.py: vLLM 0.28.0 has no "
        "vllm.entrypoints.mcp.tool_server.MCPToolServer"
    ]


def test_a_moved_name_found_nowhere_is_reported() -> None:
    modules = check_script._literal_tables()["WHERE"]["FrontendArgs"]
    tree = ShadowTree(MAIN.root, "0.33.0", removed=frozenset((module, "FrontendArgs") for module in modules))
    assert check_script.check(tree, MAIN) == [
        f"_moved.WHERE: vLLM 0.33.0 has no FrontendArgs in any of {', '.join(modules)}"
    ]


def test_a_setting_the_table_drops_passes_and_any_other_lost_parameter_fails() -> None:
    handled = ShadowTree(MAIN.root, "0.28.0", replaced={"OnlineRenderer": OLD_RENDERER})
    assert check_script.check(handled, MAIN) == []
    unhandled = ShadowTree(
        MAIN.root, "0.28.0", replaced={"OnlineRenderer": OLD_RENDERER.replace(" chat_template=None,", "")}
    )
    assert check_script.check(unhandled, MAIN) == [
        "OnlineRenderer: vLLM 0.28.0 lacks ['chat_template'] (not in _moved.NEWER_KWARGS)"
    ]


def test_a_new_required_parameter_fails() -> None:
    tree = ShadowTree(
        MAIN.root,
        "0.33.0",
        replaced={
            "OnlineRenderer": OLD_RENDERER.replace("renderer, *", "renderer, tokenizer, *").replace(
                "default_chat_template_kwargs=None", "tool_strict_level='auto', default_chat_template_kwargs=None"
            )
        },
    )
    assert check_script.check(tree, MAIN) == ["OnlineRenderer: vLLM 0.33.0 requires new parameters ['tokenizer']"]


@pytest.mark.parametrize("version", ["0.25.0", "0.34.0"])
def test_a_version_outside_the_range_is_one_problem(version: str) -> None:
    assert check_script.check(check_script.Tree(MAIN.root, version), MAIN) == [
        f"vLLM {version} is outside the frontend adapter's range 0.26.0 to 0.33.x"
    ]
