"""The built folders: config, tokenizer round trip, special tokens, the template stored with the tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from server.tinymodels import SPECS, TINY_PLAIN, TINY_TOOLS, TOOL_CALL_ANSWER, TinyModelSpec

TEXTS = ["", "hello world", "  two  spaces\tand\ttabs\n", "Grüße, 東京! 🌦️", '{"city": "Paris"}', "\x00\x7f"]


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="module")
def tokenizers(tiny_models: dict[str, Path]) -> dict[str, PreTrainedTokenizerBase]:
    return {name: AutoTokenizer.from_pretrained(path) for name, path in tiny_models.items()}


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_config(tiny_models: dict[str, Path], spec: TinyModelSpec) -> None:
    config = _json(tiny_models[spec.name] / "config.json")

    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]) == (
        128,
        2,
        1,
    )
    assert (config["head_dim"], config["num_hidden_layers"]) == (64, 2)
    assert config["max_position_embeddings"] >= 512
    assert (tiny_models[spec.name] / "model.safetensors").is_file()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_eos_agrees_everywhere(
    tiny_models: dict[str, Path], tokenizers: dict[str, PreTrainedTokenizerBase], spec: TinyModelSpec
) -> None:
    tokenizer = tokenizers[spec.name]
    eos_id = tokenizer.convert_tokens_to_ids(spec.eos_token)

    assert tokenizer.eos_token == spec.eos_token
    assert _json(tiny_models[spec.name] / "config.json")["eos_token_id"] == eos_id
    assert _json(tiny_models[spec.name] / "generation_config.json")["eos_token_id"] == eos_id


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tokenizers: dict[str, PreTrainedTokenizerBase], spec: TinyModelSpec, text: str) -> None:
    tokenizer = tokenizers[spec.name]

    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_special_tokens_are_single_special_tokens(
    tokenizers: dict[str, PreTrainedTokenizerBase], spec: TinyModelSpec
) -> None:
    tokenizer = tokenizers[spec.name]

    assert set(spec.special_tokens) <= set(tokenizer.all_special_tokens)
    for token in spec.special_tokens:
        assert tokenizer.convert_ids_to_tokens(tokenizer.encode(token, add_special_tokens=False)) == [token]
        assert tokenizer.decode(tokenizer.encode(token, add_special_tokens=False), skip_special_tokens=True) == ""


def test_tool_call_tags_survive_skip_special_tokens(tokenizers: dict[str, PreTrainedTokenizerBase]) -> None:
    # vLLM decodes with skip_special_tokens=True unless the tool parser turns it off; the tags must stay.
    tokenizer = tokenizers[TINY_TOOLS.name]
    ids = tokenizer.encode(TOOL_CALL_ANSWER + TINY_TOOLS.eos_token, add_special_tokens=False)

    assert ids[0] == tokenizer.convert_tokens_to_ids("<tool_call>")
    assert tokenizer.decode(ids, skip_special_tokens=True) == TOOL_CALL_ANSWER
    # The answer is a short token sequence, which is why training it takes seconds.
    assert len(ids) < 30


def test_plain_has_bos_and_tools_has_none(tokenizers: dict[str, PreTrainedTokenizerBase]) -> None:
    assert tokenizers[TINY_PLAIN.name].bos_token == "<s>"
    assert tokenizers[TINY_TOOLS.name].bos_token is None
    # Prompts get no bos from encoding: the templates place it (tiny-bracket) or use none (ChatML).
    assert tokenizers[TINY_PLAIN.name].encode("hi") == tokenizers[TINY_PLAIN.name].encode(
        "hi", add_special_tokens=False
    )


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_template_is_stored_with_the_tokenizer(tiny_models: dict[str, Path], spec: TinyModelSpec) -> None:
    config = _json(tiny_models[spec.name] / "tokenizer_config.json")

    assert config["chat_template"] == spec.template_path.read_text()
    # Loadable by transformers 4 as well as 5.
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
