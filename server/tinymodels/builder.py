"""Build tiny Llama models into a cache folder, once.

Each model folder holds a stamp with its spec's fingerprint; a folder whose stamp matches is reused as is, so
a second run costs a few file reads. A build happens in a temporary folder beside the target and is renamed
into place only when complete, so a crash never leaves half a model where a complete one is expected.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import tokenizers
import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from server.tinymodels.chats import sample_chats
from server.tinymodels.spec import REPO_ROOT, SPECS, TinyModelSpec
from server.tinymodels.tokenizer import build_tokenizer, token_id
from server.tinymodels.training import train

__all__ = [
    "CACHE_ENV",
    "STAMP_FILE",
    "build_tiny_model",
    "build_tiny_models",
    "default_cache_dir",
    "fingerprint",
    "is_built",
]

#: Env var that moves the default cache folder.
CACHE_ENV = "TURNOUT_TINY_MODELS"
#: Written last into a model folder: its presence with the right fingerprint means "complete and current".
STAMP_FILE = "turnout-tiny.json"


def default_cache_dir() -> Path:
    """``$TURNOUT_TINY_MODELS`` if set, else ``<repo root>/.cache/tiny-models``."""
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / ".cache" / "tiny-models")


def fingerprint(spec: TinyModelSpec) -> str:
    """A hash of everything a build depends on: equal hashes mean equal models.

    That is the spec, its template's text, this package's code (so a change to training or saving rebuilds
    without anyone remembering to bump a version) and the versions of the libraries that write the files.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(asdict(spec), sort_keys=True).encode())
    digest.update(spec.template_path.read_bytes())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    for library in (torch, transformers, tokenizers):
        digest.update(library.__version__.encode())
    return digest.hexdigest()


def is_built(spec: TinyModelSpec, dest: Path) -> bool:
    """Whether ``dest`` holds a complete build of ``spec`` (its stamp carries the spec's fingerprint)."""
    try:
        stamp = json.loads((dest / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("fingerprint") == fingerprint(spec)


def build_tiny_models(
    cache_dir: Path | None = None, specs: Sequence[TinyModelSpec] = SPECS
) -> dict[str, Path]:
    """Build every spec into ``cache_dir/<name>`` unless an up-to-date build is already there.

    Safe to call from several processes at once: builds are serialized by a lock file in ``cache_dir``.

    Args:
        cache_dir: Where the model folders live; ``None`` means ``default_cache_dir()``.
        specs: The models to build; the default is ``tiny-tools`` and ``tiny-plain``.

    Returns:
        Model name to its folder (absolute), for example ``{"tiny-tools": ..., "tiny-plain": ...}``.
    """
    root = (cache_dir or default_cache_dir()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    paths = {spec.name: root / spec.name for spec in specs}
    if all(is_built(spec, paths[spec.name]) for spec in specs):
        return paths
    with _locked(root / ".lock"):
        for spec in specs:
            # Checked again under the lock: another process may have built it while this one waited.
            if not is_built(spec, paths[spec.name]):
                build_tiny_model(spec, paths[spec.name])
    return paths


def build_tiny_model(spec: TinyModelSpec, dest: Path) -> Path:
    """Build ``spec`` into ``dest`` unconditionally, replacing whatever is there.

    The model is written to a temporary folder beside ``dest`` and renamed into place when complete.

    Args:
        spec: What to build.
        dest: The model folder to create or replace.

    Returns:
        ``dest``.

    Raises:
        RuntimeError: Training did not reach the spec's answers (nothing is written to ``dest`` then).
    """
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model folder should read like any other
    try:
        _write_model(spec, tmp)
        _replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _write_model(spec: TinyModelSpec, out: Path) -> None:
    started = time.monotonic()
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
    stamp = {
        "name": spec.name,
        "fingerprint": fingerprint(spec),
        "train_steps": steps,
        "build_seconds": round(time.monotonic() - started, 2),
    }
    # Last file written: a folder with a matching stamp is complete.
    (out / STAMP_FILE).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")


def _portable_tokenizer_config(path: Path) -> None:
    # transformers 5 writes names that transformers 4 (still pinned by some vLLM builds, e.g. for Gaudi) does
    # not know: the class TokenizersBackend and the key extra_special_tokens. The older names below mean the
    # same to transformers 5, which still reads them.
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if "extra_special_tokens" in config:
        config["additional_special_tokens"] = config.pop("extra_special_tokens")
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _replace_dir(src: Path, dest: Path) -> None:
    """Move ``src`` to ``dest``; an existing ``dest`` is moved aside first and removed only afterwards."""
    if not dest.exists():
        src.rename(dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
    old.rmdir()
    dest.rename(old)
    src.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


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


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
