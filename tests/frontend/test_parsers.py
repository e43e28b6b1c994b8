"""`parser_registry()` lists what vLLM registered, for `turnout validate`."""

from __future__ import annotations

from server.frontend.vllm_adapter import parser_registry


def test_the_registry_lists_vllms_tool_and_reasoning_parsers() -> None:
    registry = parser_registry()
    tool_parsers, reasoning_parsers = registry.tool_parsers(), registry.reasoning_parsers()
    assert {"hermes", "llama3_json", "mistral", "pythonic"} <= set(tool_parsers)
    assert {"deepseek_r1", "qwen3"} <= set(reasoning_parsers)
    assert "hermes" not in reasoning_parsers
    assert all(isinstance(name, str) for name in (*tool_parsers, *reasoning_parsers))
