"""Teach a tiny model its fixed answers in a few seconds on the CPU.

The model sees chat prompts rendered by its own template and encoded as vLLM encodes them, and learns to
answer ``spec.tools_answer`` when tools are offered and ``spec.plain_answer`` otherwise, then its EOS token.
Training stops as soon as greedy decoding is right, with a margin, on chats it has never seen; if it never
gets there the build fails rather than ship a model that answers something else.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from server.tinymodels.chats import Chat, canonical_chats, render, sample_chats
from server.tinymodels.spec import TinyModelSpec
from server.tinymodels.tokenizer import token_id

__all__ = ["Example", "encode_chat", "train"]


@dataclass(frozen=True)
class Example:
    """One training sequence: the rendered prompt's ids, then (from ``answer_start``) the answer's and EOS."""

    ids: list[int]
    answer_start: int


def encode_chat(tokenizer: PreTrainedTokenizerFast, spec: TinyModelSpec, chat: Chat) -> Example:
    """Render ``chat`` with the tokenizer's template and encode it, followed by its answer and EOS."""
    # Encoded apart and without special tokens, exactly as vLLM encodes a rendered chat prompt before the
    # model emits the answer token by token.
    prompt_ids = tokenizer.encode(render(tokenizer, chat), add_special_tokens=False)
    answer_ids = tokenizer.encode(chat.answer, add_special_tokens=False)
    eos_id = token_id(tokenizer, spec.eos_token)
    return Example(ids=[*prompt_ids, *answer_ids, eos_id], answer_start=len(prompt_ids))


def _batch(examples: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, e in enumerate(examples):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        mask[row, : len(e.ids)] = 1
        labels[row, e.answer_start : len(e.ids)] = torch.tensor(e.ids[e.answer_start :])
    return ids, mask, labels


@torch.no_grad()
def _min_margin(model: LlamaForCausalLM, examples: Sequence[Example], pad_id: int) -> float:
    """Smallest lead of the right token's logit over the best other one, at every answer position.

    Teacher forcing is enough: if the right token wins at every position given the right prefix, greedy
    decoding follows exactly that path. A positive margin means greedy decoding is right; a lead of a few
    logits keeps it right in vLLM's kernels and in other dtypes too.
    """
    model.eval()  # type: ignore[no-untyped-call]
    ids, mask, labels = _batch(examples, pad_id)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    targets = labels[:, 1:]
    scored = targets != -100
    right = logits.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    others = logits.scatter(-1, targets.clamp(min=0).unsqueeze(-1), float("-inf")).amax(-1)
    model.train()
    return float((right - others)[scored].min())


@contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    # One thread: on a busy machine (tests and engines running beside the build) two threads that wait for
    # each other at every small op ran about 3.5x slower than one; on an idle machine one costs less than 2x.
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    spec: TinyModelSpec,
    *,
    margin: float = 4.0,
    batch_size: int = 16,
    check_every: int = 25,
) -> int:
    """Train ``model`` in place until greedy decoding gives the spec's answers.

    Args:
        model: A freshly initialised model whose vocabulary matches ``tokenizer``.
        tokenizer: The model's tokenizer, with the chat template.
        spec: Gives the answers, the seed and the step budget (``train_steps``; ``0`` skips training).
        margin: Logit lead the right token needs at every answer position of every check chat.
        batch_size: Chats per optimizer step.
        check_every: Steps between two checks of the margin.

    Returns:
        The number of optimizer steps taken.

    Raises:
        RuntimeError: The margin was not reached within ``spec.train_steps`` steps.
    """
    if spec.train_steps == 0:
        return 0
    train_set = [encode_chat(tokenizer, spec, c) for c in sample_chats(spec, count=256, seed=spec.seed)]
    # Checked on chats it never trained on (another seed) and on the ones tests send: the model must answer
    # any chat, not recite its training set.
    check_chats = sample_chats(spec, count=32, seed=spec.seed + 10_000) + canonical_chats(spec)
    check_set = [encode_chat(tokenizer, spec, c) for c in check_chats]
    pad_id = tokenizer.pad_token_id
    assert isinstance(pad_id, int)
    rng = random.Random(spec.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    with _torch_threads(1):
        for step in range(1, spec.train_steps + 1):
            ids, mask, labels = _batch(rng.sample(train_set, batch_size), pad_id)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % check_every == 0 and _min_margin(model, check_set, pad_id) > margin:
                model.eval()  # type: ignore[no-untyped-call]
                return step
    raise RuntimeError(f"{spec.name} did not learn its answers within {spec.train_steps} steps")
