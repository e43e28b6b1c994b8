"""The tiny models' tokenizer: a byte-level BPE trained in milliseconds on the model's own texts.

Byte-level means every string round-trips, so clients may send anything. The merges are learnt from the
model's own chats as its template renders them, and from its answers: the template's fixed text and the
answers become few, long tokens, which keeps prompts short and training quick.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from server.tinymodels.chats import Chat, render
from server.tinymodels.spec import TinyModelSpec

__all__ = ["build_tokenizer", "token_id"]


def build_tokenizer(spec: TinyModelSpec, chat_template: str, chats: Sequence[Chat]) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer for ``spec`` and wrap it for ``save_pretrained``.

    Args:
        spec: The model spec: vocabulary size and special or added tokens.
        chat_template: The jinja chat template stored with the tokenizer.
        chats: Sample chats; their renderings and answers are the corpus the merges are learnt from.

    Returns:
        A fast tokenizer whose special tokens get ids ``0..n-1`` in ``spec.special_tokens`` order, followed by
        the byte alphabet, the merges and then ``spec.added_tokens``.
    """
    answers = [chat.answer for chat in chats]
    # Rendering needs a tokenizer that carries the template, not a good one: a first one learnt from the
    # answers alone renders the chats, and the real one learns from both.
    renderer = _train(spec, chat_template, answers)
    return _train(spec, chat_template, [*answers, *(render(renderer, chat) for chat in chats)])


def token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    """The id of ``token``, which must be a single token of ``tokenizer``."""
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int) or found == tokenizer.unk_token_id:
        raise ValueError(f"{token!r} is not a token of this tokenizer")
    return found


def _train(spec: TinyModelSpec, chat_template: str, corpus: Sequence[str]) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    # trim_offsets=False: offsets then cover the spaces that byte-level tokens carry, as in GPT-2 and Qwen.
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.bpe_vocab_size,
        min_frequency=2,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in spec.special_tokens],
        # The whole byte alphabet, so no input byte is ever unknown.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer)
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.added_tokens])
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        bos_token=spec.bos_token,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        extra_special_tokens=list(spec.extra_special_tokens),
        chat_template=chat_template,
        # Prompts for chat are rendered by the template, which places bos itself.
        add_bos_token=False,
        add_eos_token=False,
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
