"""Write one tiny model: tokenizer, config, trained weights, generation config.

Kept apart from ``builder`` because torch and transformers take seconds to import, and finding a cached model
needs neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from server.tinymodels.chats import sample_chats
from server.tinymodels.spec import TinyModelSpec
from server.tinymodels.tokenizer import build_tokenizer, token_id
from server.tinymodels.training import train

__all__ = ["write_model"]


def write_model(spec: TinyModelSpec, out: Path) -> int:
    """Build ``spec`` and save it into the existing folder ``out``; the caller makes that atomic.

    Returns:
        The number of training steps taken.

    Raises:
        RuntimeError: Training did not reach the spec's answers.
    """
    template = spec.template_path.read_text(encoding="utf-8")
    tokenizer = build_tokenizer(spec, template, sample_chats(spec, count=64, seed=spec.seed))
    ids = {token: token_id(tokenizer, token) for token in spec.special_tokens}
    bos_id = ids[spec.bos_token] if spec.bos_token else None
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        # vLLM's CPU attention rejects head_dim 16; 64 is accepted and keeps the model at ~0.4 M parameters.
        head_dim=64,
        max_position_embeddings=spec.max_position_embeddings,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=bos_id,
        eos_token_id=ids[spec.eos_token],
        pad_token_id=ids[spec.pad_token],
        dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    steps = train(model, tokenizer, spec)
    with _quiet_progress_bars():
        model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=bos_id,
        eos_token_id=ids[spec.eos_token],
        pad_token_id=ids[spec.pad_token],
        do_sample=False,
    ).save_pretrained(out)
    # save_jinja_files=False keeps the template inside tokenizer_config.json, where older loaders look too.
    tokenizer.save_pretrained(out, save_jinja_files=False)
    _portable_tokenizer_config(out / "tokenizer_config.json")
    return steps


def _portable_tokenizer_config(path: Path) -> None:
    # transformers 5 writes names that transformers 4 (still pinned by some vLLM builds, e.g. for Gaudi) does
    # not know: the class TokenizersBackend and the key extra_special_tokens. The older names below mean the
    # same to transformers 5, which still reads them.
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if "extra_special_tokens" in config:
        config["additional_special_tokens"] = config.pop("extra_special_tokens")
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    # save_pretrained draws a progress bar for a single tiny shard: noise in every test log.
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
