"""The reference answers' bookkeeping (``tests/vllm_reference.py``): one server start per checkpoint content, shared by
the session's processes, and a checkpoint rewritten in place (the same sizes and times) is another checkpoint. The
server itself is stood in for: the proof's and the kv drill's engine tests start real ones."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server.profiles import ModelProfile
from tests import vllm_reference
from tests.vllm_reference import VllmReference


def test_a_checkpoint_costs_one_start_whoever_asks_and_a_rewrite_is_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []

    def asked(start: Callable[[], Any], ask: Callable[[str], dict[str, str]]) -> dict[str, str]:
        started.append("server")
        return {"hello": f"answer {len(started)}"}

    monkeypatch.setattr(vllm_reference, "asked", asked)
    checkpoint = tmp_path / "plain"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"w" * 64)
    copy = shutil.copytree(checkpoint, tmp_path / "copy")
    shared = tmp_path / "shared"

    first = VllmReference(shared).answers("plain", ModelProfile(model=str(checkpoint)))
    # Another xdist worker, on a copy of the same checkpoint: the answers kept in the shared folder.
    assert VllmReference(shared).answers("plain", ModelProfile(model=str(copy))) == first
    assert started == ["server"]

    weights = checkpoint / "model.safetensors"
    stamp = weights.stat()
    weights.write_bytes(b"v" * 64)
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert VllmReference(shared).answers("plain", ModelProfile(model=str(checkpoint))) == {"hello": "answer 2"}
    engine_args = ModelProfile(model=str(copy), engine_args={"dtype": "bfloat16"})
    assert VllmReference(shared).answers("plain", engine_args) == {"hello": "answer 3"}, "other engine arguments"
    kept_kv = ModelProfile(model=str(copy), engine_args={"kv_transfer_config": {"kv_connector": "TurnoutKVKeep"}})
    assert VllmReference(shared).answers("plain", kept_kv) == first, "Turnout's connector is no model argument"
    assert len(started) == 3
