"""What a tiny model is: the frozen spec the builder builds from, and the two specs Turnout ships.

A spec, its chat template file and the builder's code fully determine a build (training is seeded), so the
builder fingerprints them to decide whether a cached model is still good.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "REPO_ROOT",
    "SPECS",
    "TEMPLATES_DIR",
    "TINY_PLAIN",
    "TINY_TOOLS",
    "TOOL_CALL_ANSWER",
    "WEATHER_TOOL",
    "TinyModelSpec",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The canonical chat templates: the builder copies them into each model's ``tokenizer_config.json``.
TEMPLATES_DIR = REPO_ROOT / "templates"

#: What tiny-tools answers, greedily, to any chat prompt that offers tools: one hermes-style call.
TOOL_CALL_ANSWER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

#: The tool tests offer (OpenAI ``tools`` entry); tiny-tools is trained on prompts that offer it.
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name."}},
            "required": ["city"],
        },
    },
}


@dataclass(frozen=True, kw_only=True)
class TinyModelSpec:
    """Everything that decides what one tiny Llama model is.

    The architecture is fixed by the builder (head_dim 64 is the smallest that vLLM's CPU attention accepts);
    the spec holds what differs between models.

    Attributes:
        name: The model's folder name in the cache, e.g. ``tiny-tools``.
        template: Chat template file; relative names resolve against ``templates/``.
        bos_token: Beginning-of-sequence token, or ``None`` when the template uses none (ChatML).
        eos_token: The token the model ends its answer with; vLLM stops on it.
        pad_token: Padding token (training pads batches with it).
        added_tokens: Extra single tokens that are *not* special, so decoding with ``skip_special_tokens``
            keeps them (the hermes tool parser must see ``<tool_call>`` in the text).
        extra_special_tokens: Extra special tokens besides bos, eos and pad.
        tools_answer: The answer to any prompt that offers tools; ``None`` for a model without tool support.
        plain_answer: The answer to any prompt that offers no tools. Training on it makes the model stop after
            a few tokens instead of rambling to ``max_tokens``.
        train_steps: Most optimizer steps; training stops earlier once every check prompt decodes right.
            ``0`` keeps the random weights (fast builds for tests).
        seed: Seed for weights, training data and training order.
        bpe_vocab_size: Target size of the byte-level BPE vocabulary, before added tokens.
        max_position_embeddings: Longest sequence the model config allows.
    """

    name: str
    template: str
    bos_token: str | None
    eos_token: str
    pad_token: str
    added_tokens: tuple[str, ...] = ()
    extra_special_tokens: tuple[str, ...] = ()
    tools_answer: str | None = None
    plain_answer: str
    train_steps: int = 600
    seed: int = 0
    bpe_vocab_size: int = 1024
    max_position_embeddings: int = 2048

    @property
    def template_path(self) -> Path:
        """The chat template file this spec uses."""
        return TEMPLATES_DIR / self.template

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """All special tokens, without duplicates, in a stable order (their ids are 0, 1, ...)."""
        tokens = (self.pad_token, self.bos_token, self.eos_token, *self.extra_special_tokens)
        return tuple(dict.fromkeys(t for t in tokens if t is not None))


TINY_TOOLS = TinyModelSpec(
    name="tiny-tools",
    template="tiny-chatml-tools.jinja",
    bos_token=None,
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    extra_special_tokens=("<|im_start|>",),
    # Not special, as in Qwen2.5: vLLM's hermes parser looks for these strings in the decoded text.
    added_tokens=(
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<tools>",
        "</tools>",
    ),
    tools_answer=TOOL_CALL_ANSWER,
    plain_answer="Hello from tiny-tools.",
)

TINY_PLAIN = TinyModelSpec(
    name="tiny-plain",
    template="tiny-bracket.jinja",
    bos_token="<s>",
    eos_token="</s>",
    pad_token="<pad>",
    plain_answer="Hello from tiny-plain.",
    # Light training: it only has to learn one short answer and to stop.
    train_steps=300,
    seed=1,
)

#: The models ``build_tiny_models`` builds by default, by name.
SPECS: tuple[TinyModelSpec, ...] = (TINY_TOOLS, TINY_PLAIN)
