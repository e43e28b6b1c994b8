"""The two chat templates, rendered the way vLLM renders them (transformers' jinja sandbox)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from server.tinymodels import TINY_PLAIN, TINY_TOOLS, WEATHER_TOOL

USER = [{"role": "user", "content": "What's the weather in Paris?"}]
TOOL_ROUND: list[dict[str, Any]] = [
    *USER,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]


@pytest.fixture(scope="module")
def chatml(tiny_models: dict[str, Path]) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(tiny_models[TINY_TOOLS.name])


@pytest.fixture(scope="module")
def bracket(tiny_models: dict[str, Path]) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(tiny_models[TINY_PLAIN.name])


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    assert isinstance(text, str)
    return text


def test_chatml_without_tools(chatml: PreTrainedTokenizerBase) -> None:
    text = _render(chatml, [{"role": "system", "content": "Be brief."}, *USER])

    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chatml_puts_tools_into_the_system_turn(chatml: PreTrainedTokenizerBase) -> None:
    text = _render(chatml, [{"role": "system", "content": "Be brief."}, *USER], tools=[WEATHER_TOOL])

    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert f"<tools>\n{json.dumps(WEATHER_TOOL, ensure_ascii=False)}\n</tools>" in text
    assert text.count("<|im_start|>system") == 1
    assert text.endswith("<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n<|im_start|>assistant\n")


def test_chatml_renders_tool_calls_and_results(chatml: PreTrainedTokenizerBase) -> None:
    text = _render(chatml, TOOL_ROUND, tools=[WEATHER_TOOL])

    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    ) in text


def test_chatml_renders_dict_arguments_like_string_ones(chatml: PreTrainedTokenizerBase) -> None:
    as_dict = json.loads(json.dumps(TOOL_ROUND))
    as_dict[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}

    assert _render(chatml, as_dict, tools=[WEATHER_TOOL]) == _render(chatml, TOOL_ROUND, tools=[WEATHER_TOOL])


def test_bracket_is_recognisable_and_ignores_tools(bracket: PreTrainedTokenizerBase) -> None:
    plain = _render(bracket, [{"role": "system", "content": "Be brief."}, *USER])

    assert plain == "<s><<turnout-bracket>>\n[SYS] Be brief. [/SYS]\n[INST] What's the weather in Paris? [/INST]\n"
    assert _render(bracket, USER, tools=[WEATHER_TOOL]) == _render(bracket, USER)


def test_bracket_shows_a_tool_result_as_text(bracket: PreTrainedTokenizerBase) -> None:
    text = _render(bracket, TOOL_ROUND)

    assert text.endswith("[/INST]\n</s>\n[TOOL] sunny [/TOOL]\n")


def test_templates_cannot_be_mistaken(chatml: PreTrainedTokenizerBase, bracket: PreTrainedTokenizerBase) -> None:
    chatml_text, bracket_text = _render(chatml, USER), _render(bracket, USER)

    assert "<|im_start|>" in chatml_text and "<<turnout-bracket>>" not in chatml_text
    assert "<<turnout-bracket>>" in bracket_text and "<|im_start|>" not in bracket_text
