"""A parser registry with a fixed set of names, so profile tests do not need vLLM's real one."""

from __future__ import annotations

from collections.abc import Collection

from server.profiles.registry import NameRegistry

__all__ = ["REASONING_PARSERS", "TOOL_PARSERS", "FakeParserRegistry"]

TOOL_PARSERS = ("hermes", "llama3_json", "mistral", "pythonic")
REASONING_PARSERS = ("deepseek_r1", "qwen3")


class FakeParserRegistry(NameRegistry):
    """``server.profiles.ParserRegistry`` over a few real vLLM parser names."""

    def __init__(self, tools: Collection[str] = TOOL_PARSERS, reasoning: Collection[str] = REASONING_PARSERS) -> None:
        super().__init__(tools, reasoning)
