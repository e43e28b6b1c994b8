"""The proof's parts without an engine: two readings compared as vLLM's tests compare runs, the fingerprints kept
0600 in the state folder and keyed on the checkpoint's content, and the probe read off a bundle's answers."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from server.engine.runtime import (
    Fingerprint,
    FingerprintStore,
    InjectedFaults,
    StateDir,
    content_digests,
    fingerprint_key,
    parse_fault,
)
from server.engine.switching.probe_agreement import agreement
from server.frontend import JsonResult, ProbeAnswer, probe_bundle
from server.profiles.schema import ModelProfile


def _reading(tokens: list[int], firsts: list[float], seconds: list[float]) -> ProbeAnswer:
    top = [[(token, first), (token + 1, second)] for token, first, second in zip(tokens, firsts, seconds, strict=True)]
    return ProbeAnswer(tokens=tokens, top=top)


RECORDED = _reading([5, 6, 7, 8], [-0.1, -0.2, -0.05, -0.3], [-3.0, -0.25, -4.0, -2.0])


def test_a_reading_within_rounding_agrees() -> None:
    observed = _reading([5, 6, 7, 8], [-0.11, -0.21, -0.06, -0.31], [-3.0, -0.25, -4.0, -2.0])
    assert agreement(RECORDED, observed, "float32").agrees


def test_a_token_may_differ_only_where_the_recorded_top_two_were_a_near_tie() -> None:
    # Position 1 recorded a gap of 0.05: healthy engines may pick either there, and diverge afterwards.
    tie = _reading([5, 9, 1, 2], [-0.1, -0.2, -3.0, -3.0], [-3.0, -0.25, -4.0, -4.0])
    assert agreement(RECORDED, tie, "float32").agrees
    # Position 0 recorded a gap of 2.9: a different token there is a different model.
    confident = _reading([4, 6, 7, 8], [-0.1, -0.2, -0.05, -0.3], [-3.0, -0.25, -4.0, -2.0])
    verdict = agreement(RECORDED, confident, "float32")
    assert not verdict.agrees and "token 0" in verdict.detail


def test_the_same_tokens_with_drifted_logprobs_disagree() -> None:
    stale = _reading([5, 6, 7, 8], [-0.35, -0.45, -0.3, -0.55], [-3.0, -0.25, -4.0, -2.0])
    verdict = agreement(RECORDED, stale, "float32")
    assert not verdict.agrees and "mean |logprob|" in verdict.detail
    assert agreement(RECORDED, _reading([5, 6, 7, 8], [-0.15, -0.25, -0.1, -0.35], [0, 0, 0, 0]), "bfloat16").agrees


def test_pooling_vectors_agree_within_a_cosine_distance() -> None:
    recorded = ProbeAnswer(vector=[1.0, 2.0, 3.0])
    assert agreement(recorded, ProbeAnswer(vector=[1.0, 2.0, 3.00001]), "float32").agrees
    assert not agreement(recorded, ProbeAnswer(vector=[-1.0, 2.0, 3.0]), "float32").agrees
    assert not agreement(recorded, ProbeAnswer(tokens=[1]), "float32").agrees


def test_fingerprints_are_kept_0600_in_the_state_folder(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "turnout")
    store = FingerprintStore(state)
    assert store.load("m") is None
    fingerprint = Fingerprint(key="k", dtype="float32", tokens=[1, 2], top=[[(1, -0.1), (3, -2.0)]])
    store.save("m/with a slash", fingerprint)
    assert store.load("m/with a slash") == fingerprint
    (kept,) = [path for path in state.root.iterdir() if path.name.startswith("fingerprint-")]
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    kept.write_text("not json")
    assert store.load("m/with a slash") is None  # unreadable: recorded again, never trusted


def test_the_key_follows_the_checkpoints_content_not_its_sizes_and_times(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    checkpoint = tmp_path / "model"
    shutil.copytree(tiny_models["tiny-plain"], checkpoint)
    state = StateDir(tmp_path / "turnout")
    profile = ModelProfile(model=str(checkpoint), engine_args={"dtype": "float32"})
    key = fingerprint_key(profile, content_digests(state), "0.32.0")
    assert (state.root / "content-digests.json").is_file()  # the digests outlive the server, in its state folder
    weights = next(checkpoint.glob("*.safetensors"))
    before = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the last tensor's last byte: the same size, and the times set back as `cp -p` does
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert fingerprint_key(profile, content_digests(state), "0.32.0") != key
    changed = fingerprint_key(profile, content_digests(state), "0.32.0")
    assert fingerprint_key(profile, content_digests(state), "0.33.0") != changed
    assert fingerprint_key(ModelProfile(model=str(checkpoint)), content_digests(state), "0.32.0") != changed


class _AnsweringBundle:
    """A bundle whose chat answers as vLLM does with ``return_tokens_as_token_ids`` (or 400, for no template)."""

    def __init__(self, *, chat: bool) -> None:
        self.has_chat = chat
        self.bodies: list[tuple[str, dict[str, Any]]] = []

    async def call(self, operation: str, body: dict[str, Any], request_id: str) -> JsonResult:
        self.bodies.append((operation, body))
        if operation == "chat.completions":
            return self._chat()
        if operation == "completions":
            logprobs = {"tokens": ["token_id:21"], "top_logprobs": [{"token_id:3": -3.0, "token_id:21": -0.1}]}
            return JsonResult(200, {"choices": [{"logprobs": logprobs}]})
        raise AssertionError(f"a generating model is never probed by {operation}")

    def _chat(self) -> JsonResult:
        if not self.has_chat:
            return JsonResult(400, {"error": {"message": "no chat template", "code": 400}})
        content = [
            {
                "token": f"token_id:{n}",
                "logprob": -0.5,
                "top_logprobs": [{"token": f"token_id:{n}", "logprob": -0.5}, {"token": "token_id:0", "logprob": -2.0}],
            }
            for n in (11, 12)
        ]
        return JsonResult(200, {"choices": [{"logprobs": {"content": content}}]})


async def test_the_probe_reads_chat_token_ids_else_a_completions_greedy_and_salted() -> None:
    chat = _AnsweringBundle(chat=True)
    assert await probe_bundle(chat) == ProbeAnswer(
        tokens=[11, 12], top=[[(11, -0.5), (0, -2.0)], [(12, -0.5), (0, -2.0)]]
    )
    plain = _AnsweringBundle(chat=False)
    assert await probe_bundle(plain) == ProbeAnswer(tokens=[21], top=[[(21, -0.1), (3, -3.0)]])
    bodies = [body for _, body in chat.bodies + plain.bodies]
    assert all(body["temperature"] == 0.0 and body["cache_salt"].startswith("turnout-probe-") for body in bodies)
    assert len({body["cache_salt"] for body in bodies}) == 2  # each probe its own: no cache answers it


def test_faults_are_given_as_kind_and_model_and_a_weights_fault_is_used_once() -> None:
    assert parse_fault("weights:tools") == ("weights", "tools")
    assert parse_fault("kv:plain") == ("kv", "plain")
    for wrong in ("weights", "weights:", "tensor:tools", ":tools"):
        with pytest.raises(ValueError, match="weights:MODEL or kv:MODEL"):
            parse_fault(wrong)
    faults = InjectedFaults([("weights", "tools"), ("kv", "plain")])
    assert faults.armed() == ["weights:tools", "kv:plain"] and faults.models("kv") == ["plain"]
    assert faults.take("weights", "tools") and not faults.take("weights", "tools")
    assert faults.armed() == ["kv:plain"]
