"""The chats a tiny model learns from: random, seeded, and shaped like what OpenAI clients send.

The tokenizer learns its merges from these chats rendered by the model's template, and training teaches the
model to answer them. Variety (systems, earlier turns, finished tool rounds, other tools, random words) is
what makes the model answer prompts it has never seen.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from server.tinymodels.spec import WEATHER_TOOL, TinyModelSpec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["Chat", "canonical_chats", "render", "sample_chats"]

# Words for random user turns, so the model learns to answer whatever the user says.
_WORD_TEXT = (
    "weather rain sun Paris London Tokyo today tomorrow please tell me what is the how warm cold city trip "
    "hello hi thanks joke forecast wear outside umbrella time now quick question answer help plan weekend"
)
_WORDS = _WORD_TEXT.split()
_PROMPTS = (
    "What's the weather in Paris?",
    "What is the weather like in Paris today?",
    "Is it raining in Paris?",
    "Hello!",
    "hi",
    "Tell me a joke.",
    "Do I need an umbrella tomorrow?",
    "Say something.",
)
_SYSTEMS = ("You are a helpful assistant.", "Answer briefly.", "You are Turnout's test model.")
_DESCRIPTIONS = (
    "Get the current weather in a city.",
    "Get the current weather for a location",
    "Weather lookup.",
    "",
)


def _tool(name: str, description: str, params: dict[str, str]) -> dict[str, Any]:
    properties = {key: {"type": kind} for key, kind in params.items()}
    function = {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(params)},
    }
    return {"type": "function", "function": function}


_OTHER_TOOLS = (
    _tool("get_time", "Get the current time in a timezone.", {"timezone": "string"}),
    _tool("search", "Search the web.", {"query": "string", "limit": "integer"}),
    _tool("add", "Add two numbers.", {"a": "number", "b": "number"}),
)


@dataclass(frozen=True)
class Chat:
    """A chat prompt and the answer the model must give to it.

    Attributes:
        messages: OpenAI-style messages, ending with the turn the model answers.
        tools: OpenAI ``tools`` entries, or ``None`` when the chat offers none.
        answer: The answer text, without the EOS token.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    answer: str


def _user_text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_PROMPTS)
    return " ".join(rng.choices(_WORDS, k=rng.randint(1, 12))) + rng.choice(("", "?", ".", "!"))


def _tools(rng: random.Random) -> list[dict[str, Any]]:
    weather = copy.deepcopy(WEATHER_TOOL)
    weather["function"]["description"] = rng.choice(_DESCRIPTIONS)
    offered = [weather] if rng.random() < 0.85 else []
    offered += rng.sample(_OTHER_TOOLS, k=rng.randint(0 if offered else 1, 2))
    rng.shuffle(offered)
    return offered


def _messages(rng: random.Random, spec: TinyModelSpec, with_tools: bool) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.4:
        messages.append({"role": "system", "content": rng.choice(_SYSTEMS)})
    if rng.random() < 0.25:
        messages.append({"role": "user", "content": _user_text(rng)})
        messages.append({"role": "assistant", "content": spec.plain_answer})
    messages.append({"role": "user", "content": _user_text(rng)})
    if with_tools and rng.random() < 0.2:
        # A finished tool round: the model is asked again and, being tiny, calls the tool again.
        call = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]})
        messages.append({"role": "tool", "content": rng.choice(("sunny, 21 C", '{"temp": 21}'))})
    return messages


def sample_chats(spec: TinyModelSpec, count: int, seed: int) -> list[Chat]:
    """``count`` random chats; every other one offers tools when the spec supports them.

    Args:
        spec: Gives the answers and whether the model supports tools.
        count: How many chats.
        seed: Equal seeds give equal chats.
    """
    rng = random.Random(seed)
    chats = []
    for i in range(count):
        if spec.tools_answer is not None and i % 2 == 0:
            chats.append(Chat(_messages(rng, spec, True), _tools(rng), spec.tools_answer))
        else:
            chats.append(Chat(_messages(rng, spec, False), None, spec.plain_answer))
    return chats


def canonical_chats(spec: TinyModelSpec) -> list[Chat]:
    """The chats tests send most: a short question, also with just the weather tool if tools are supported."""
    chats = [
        Chat([{"role": "user", "content": text}], None, spec.plain_answer)
        for text in ("What's the weather in Paris?", "Hello!")
    ]
    if spec.tools_answer is not None:
        chats += [Chat(chat.messages, [WEATHER_TOOL], spec.tools_answer) for chat in list(chats)]
    return chats


def render(tokenizer: PreTrainedTokenizerBase, chat: Chat) -> str:
    """The prompt text of ``chat``: its messages and tools rendered by the tokenizer's chat template."""
    # list[Any]: transformers' annotation wants list[dict[Any, Any] | Callable], which a list of dicts is not.
    tools: list[Any] | None = chat.tools
    prompt = tokenizer.apply_chat_template(chat.messages, tools=tools, tokenize=False, add_generation_prompt=True)
    return str(prompt)
