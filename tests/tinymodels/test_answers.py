"""What the trained models answer, decoded greedily with transformers (no vLLM, so it runs in a second)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerBase

from server.tinymodels import TINY_PLAIN, TINY_TOOLS, TOOL_CALL_ANSWER, WEATHER_TOOL, TinyModelSpec

OTHER_TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
CHATS = [
    [{"role": "user", "content": "What's the weather in Paris?"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Book a table for two, 8 pm."},
    ],
]


@functools.cache
def _load(folder: Path) -> tuple[PreTrainedTokenizerBase, LlamaForCausalLM]:
    model = LlamaForCausalLM.from_pretrained(folder).eval()  # type: ignore[no-untyped-call]
    return AutoTokenizer.from_pretrained(folder), model


@torch.no_grad()
def _greedy(folder: Path, spec: TinyModelSpec, messages: list[dict[str, Any]], tools: Any = None) -> str:
    tokenizer, model = _load(folder)
    prompt = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    eos_id = tokenizer.convert_tokens_to_ids(spec.eos_token)
    answer: list[int] = []
    for _ in range(40):
        token = int(model(input_ids=torch.tensor([ids + answer])).logits[0, -1].argmax())
        if token == eos_id:
            return str(tokenizer.decode(answer))
        answer.append(token)
    raise AssertionError(f"no EOS after {tokenizer.decode(answer)!r}")


@pytest.mark.parametrize("messages", CHATS)
@pytest.mark.parametrize("tools", [[WEATHER_TOOL], [OTHER_TOOL, WEATHER_TOOL]], ids=["weather", "two-tools"])
def test_tiny_tools_calls_the_tool_when_offered_tools(
    tiny_models: dict[str, Path], messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> None:
    assert _greedy(tiny_models[TINY_TOOLS.name], TINY_TOOLS, messages, tools) == TOOL_CALL_ANSWER


@pytest.mark.parametrize("messages", CHATS)
def test_tiny_tools_answers_plainly_without_tools(tiny_models: dict[str, Path], messages: list[dict[str, Any]]) -> None:
    assert _greedy(tiny_models[TINY_TOOLS.name], TINY_TOOLS, messages) == TINY_TOOLS.plain_answer


@pytest.mark.parametrize("messages", CHATS)
def test_tiny_plain_answers_plainly_even_with_tools(
    tiny_models: dict[str, Path], messages: list[dict[str, Any]]
) -> None:
    assert _greedy(tiny_models[TINY_PLAIN.name], TINY_PLAIN, messages, [WEATHER_TOOL]) == TINY_PLAIN.plain_answer
