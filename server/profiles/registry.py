"""The parser registry that validation checks names against.

Validation only needs the registered names. The real registry (vLLM's tool and reasoning parser managers) is
built by the frontend adapter, which is allowed to import vLLM's entrypoints; ``profiles/`` is not, so it only
knows this Protocol.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

__all__ = ["NameRegistry", "ParserRegistry"]


class ParserRegistry(Protocol):
    """The names of the tool-call and reasoning parsers that the serving vLLM has registered."""

    def tool_parsers(self) -> Collection[str]:
        """Return every registered tool-call parser name (``hermes``, ``llama3_json``, ...)."""
        ...

    def reasoning_parsers(self) -> Collection[str]:
        """Return every registered reasoning parser name (``qwen3``, ``deepseek_r1``, ...)."""
        ...


class NameRegistry:
    """A :class:`ParserRegistry` over fixed sets of names (read from vLLM's source tables, or a test's)."""

    def __init__(self, tools: Collection[str], reasoning: Collection[str]) -> None:
        self._tools = frozenset(tools)
        self._reasoning = frozenset(reasoning)

    def tool_parsers(self) -> Collection[str]:
        return self._tools

    def reasoning_parsers(self) -> Collection[str]:
        return self._reasoning
