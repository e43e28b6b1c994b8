"""A fresh vLLM server's greedy answers on a checkpoint: what a test compares Turnout's answers with.

``python -m vllm.entrypoints.openai.api_server`` (as ``tests/api/test_vllm_differential.py`` starts it) runs the
model's checkpoint with its engine arguments (no kept-KV connector), answers every prompt of :data:`PROMPTS`
greedily (temperature 0, ``ignore_eos``, :data:`MAX_TOKENS` tokens), and stops. The answers are kept for the test
session by the checkpoint's content and the engine arguments, so that a checkpoint costs one server start per
session whichever tests ask (a copy of a checkpoint is the same checkpoint; one rewritten in place is another).
They are kept in a folder the session's xdist workers share, each checkpoint's under a lock: a worker that asks
for a checkpoint another is starting a server for waits for its answers instead of starting one of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

import httpx
import msgspec

from benchmarks.servers import ServedModel, ServerProcess, start_vllm
from server.profiles import ModelProfile

__all__ = ["LONG", "MAX_TOKENS", "PROMPTS", "VllmReference", "asked", "checkpoint_key", "greedy_body"]

#: A prompt of several blocks (vLLM's CPU block size is 128), in token ids below both tiny vocabularies.
LONG: Final = [20 + (i * 37) % 400 for i in range(300)]
#: The prompts every reference answers, by name.
PROMPTS: Final[dict[str, str | list[int]]] = {"hello": "Hello", "long": LONG}
MAX_TOKENS: Final = 8
#: How long a reference server may take to get ready: about 25 s, far longer on a busy machine.
READY_S: Final = 300.0

T = TypeVar("T")


def greedy_body(model: str, prompt: str | list[int]) -> dict[str, object]:
    """A ``/v1/completions`` body both servers answer alike: greedy, :data:`MAX_TOKENS` tokens, past any EOS."""
    return {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}


def asked(start: Callable[[], ServerProcess], ask: Callable[[str], T]) -> T:
    """Start a server, ``ask`` it (given its URL) once it is ready, and stop it whatever happened."""
    server = start()
    try:
        server.wait_ready(timeout=READY_S)
        return ask(server.url)
    finally:
        server.stop()


def checkpoint_key(model: ModelProfile) -> str:
    """The content of ``model``'s checkpoint folder (every file's path and bytes) and its engine arguments."""
    digest = hashlib.sha256(json.dumps(_engine_args(model), sort_keys=True, default=str).encode())
    folder = Path(model.model)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        with path.open("rb") as file:
            digest.update(hashlib.file_digest(file, "sha256").digest())
    return digest.hexdigest()


def _engine_args(model: ModelProfile) -> dict[str, object]:
    """The engine arguments a plain vLLM server gets: Turnout's kept-KV connector is Turnout's, not the model's."""
    return {key: value for key, value in model.engine_args.items() if key != "kv_transfer_config"}


class VllmReference:
    """The session's reference answers (see the module's docstring); ``starts`` names each server this process
    started.

    Args:
        shared: The folder the session's processes keep the answers in (and each reference server's log).
    """

    def __init__(self, shared: Path) -> None:
        shared.mkdir(parents=True, exist_ok=True)
        self._shared = shared
        self.starts: list[str] = []

    def answers(self, name: str, model: ModelProfile) -> dict[str, str]:
        """Each of :data:`PROMPTS`' greedy answers (its text) by a fresh vLLM server on ``model``'s checkpoint as
        its files are now, served as ``name``."""
        key = checkpoint_key(model)
        kept = self._shared / f"{key}.json"
        with _locked(self._shared / f"{key}.lock"):
            if not kept.exists():
                served = ServedModel(
                    name=name,
                    profile_path=Path(model.model),  # unused: only turnout serve reads a profile file
                    model=msgspec.structs.replace(model, engine_args=_engine_args(model)),
                )
                self.starts.append(f"{name}@{key[:12]}")
                label = f"reference-{key[:12]}-{name}"
                answers = asked(lambda: start_vllm(served, self._shared, label=label), _ask(name))
                kept.write_text(json.dumps(answers))
            texts: dict[str, str] = json.loads(kept.read_text())
        return texts

    def prefetch(self, models: list[tuple[str, ModelProfile]]) -> None:
        """Answer for each ``(name, model)`` in turn in a background thread (one reference server at a time), while
        the test goes on; :meth:`answers` for one of them then waits for it (or, after a failure, starts its own)."""

        def fetch() -> None:
            for name, model in models:
                with contextlib.suppress(Exception):  # answers() raises it again where a test asks
                    self.answers(name, model)

        threading.Thread(target=fetch, name="vllm-reference").start()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def _ask(name: str) -> Callable[[str], dict[str, str]]:
    def ask(url: str) -> dict[str, str]:
        texts = {}
        with httpx.Client(base_url=url, timeout=120) as client:
            for label, prompt in PROMPTS.items():
                answer = client.post("/v1/completions", json=greedy_body(name, prompt))
                assert answer.status_code == 200, answer.text
                texts[label] = str(answer.json()["choices"][0]["text"])
        return texts

    return ask
