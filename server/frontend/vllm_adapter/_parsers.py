"""vLLM's tool and reasoning parser registries: the names they hold, and custom parser plugin files loaded into them.

`turnout validate` and every profile check read the names (`parser_registry`); `turnout serve` loads the
``--tool-parser-plugin`` / ``--reasoning-parser-plugin`` files first, so that their parsers' names are valid.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Collection

from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from vllm.utils.import_utils import import_from_path

__all__ = ["ParserRegistry", "load_parser_plugins", "parser_registry"]

_log = logging.getLogger(__name__)


class ParserRegistry:
    """The tool and reasoning parser names registered in the installed vLLM, read afresh on each call."""

    def tool_parsers(self) -> Collection[str]:
        """Names accepted as `tool_call_parser`."""
        return frozenset(ToolParserManager.list_registered())

    def reasoning_parsers(self) -> Collection[str]:
        """Names accepted as `reasoning_parser`."""
        return frozenset(ReasoningParserManager.list_registered())


def parser_registry() -> ParserRegistry:
    """The parser names vLLM knows (for `turnout validate`; import this package lazily, it pulls in vLLM)."""
    return ParserRegistry()


def load_parser_plugins(*, tool_parser_plugin: str | None = None, reasoning_parser_plugin: str | None = None) -> None:
    """Import custom parser files so that their parsers register with vLLM (as `vllm serve` does at start).

    A plugin is a module name or a Python file; its ``@ToolParserManager.register_module(...)`` (or the
    reasoning manager's) decorators register its parsers as it is imported. This is what
    ``ToolParserManager.import_tool_parser`` does, except that a plugin which fails to import is an error here
    (vLLM only logs it, and the server would then refuse the profile for a parser name it never saw).

    Raises:
        ValueError: A plugin that cannot be imported.
    """
    for path in (tool_parser_plugin, reasoning_parser_plugin):
        if path:
            _import_plugin(path)


def _import_plugin(path: str) -> None:
    # A module name first, else a file path: as vLLM 0.32's ``import_plugin`` (0.26 to 0.31 have only
    # ``import_from_path``, which every supported vLLM has).
    try:
        importlib.import_module(path)
        return
    except ModuleNotFoundError:
        pass
    try:
        import_from_path(os.path.splitext(os.path.basename(path))[0], path)
    except Exception as exc:
        _log.exception("parser plugin %r cannot be loaded", path)
        raise ValueError(f"parser plugin {path!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
