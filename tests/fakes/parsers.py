"""A parser registry with a fixed set of names, so profile tests do not need vLLM's real one."""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["REASONING_PARSERS", "TOOL_PARSERS", "FakeParserRegistry"]

TOOL_PARSERS = ("hermes", "llama3_json", "mistral", "pythonic")
REASONING_PARSERS = ("deepseek_r1", "qwen3")


class FakeParserRegistry:
    """Implements ``server.profiles.ParserRegistry`` over fixed names."""

    def __init__(self, tools: Collection[str] = TOOL_PARSERS, reasoning: Collection[str] = REASONING_PARSERS) -> None:
        self._tools = frozenset(tools)
        self._reasoning = frozenset(reasoning)

    def tool_parsers(self) -> Collection[str]:
        return self._tools

    def reasoning_parsers(self) -> Collection[str]:
        return self._reasoning
