"""The kept-KV pool on its own: bound, least-recently-used order across models, identity, clean-up."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from server.profiles import load_profile
from server.vllm_plugin import with_kv_keep
from server.vllm_plugin.kv_keep import TurnoutKVKeep
from server.vllm_plugin.kv_pool import KVPool, kept_bytes_by_name, model_identity, pool_folder

BLOCK = 1000


def _aged(pool: KVPool, identity: str, key: str, age_s: float) -> None:
    pool.write_block(identity, key, b"x" * BLOCK)
    past = time.time() - age_s
    os.utime(pool.model_dir(identity) / key, (past, past))


def test_the_bound_holds_across_models_and_the_least_recently_used_go_first(tmp_path: Path) -> None:
    pool = KVPool(tmp_path / "pool", limit_bytes=5 * BLOCK)
    for model in range(4):  # 12 blocks of 4 models, the oldest first
        for block in range(3):
            _aged(pool, f"m{model}", f"b{block}", age_s=100 - (model * 3 + block))
    pool.read_block("m0", "b0", BLOCK)  # used just now: the youngest

    pool.enforce_bound()

    assert sum(pool.usage().values()) <= 5 * BLOCK
    assert pool.has_block("m0", "b0")
    assert pool.has_block("m3", "b2") and pool.has_block("m3", "b1") and pool.has_block("m3", "b0")
    assert not pool.has_block("m0", "b1") and not pool.has_block("m1", "b0")


def test_a_short_block_is_refused(tmp_path: Path) -> None:
    pool = KVPool(tmp_path, limit_bytes=10 * BLOCK)
    pool.write_block("m", "k", b"x" * (BLOCK - 1))
    with pytest.raises(ValueError, match="another size"):
        pool.read_block("m", "k", BLOCK)
    with pytest.raises(OSError):
        pool.read_block("m", "gone", BLOCK)


def test_a_model_whose_identity_changed_loses_its_blocks(tmp_path: Path) -> None:
    pool = KVPool(tmp_path, limit_bytes=10 * BLOCK)
    pool.claim("plain", "old-weights")
    pool.write_block("old-weights", "k", b"x")
    pool.claim("other", "other-weights")
    pool.write_block("other-weights", "k", b"x")

    pool.claim("plain", "new-weights")

    assert not pool.has_block("old-weights", "k")
    assert pool.has_block("other-weights", "k")


def _config(folder: Path) -> SimpleNamespace:
    model = SimpleNamespace(model=str(folder), revision=None, dtype="float32", quantization=None, tokenizer=str(folder))
    cache = SimpleNamespace(cache_dtype="auto", block_size=32, prefix_caching_hash_algo="sha256")
    parallel = SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1)
    return SimpleNamespace(model_config=model, cache_config=cache, parallel_config=parallel)


def test_model_identity_follows_the_weights_and_the_tokenizer(tmp_path: Path) -> None:
    weights, tokenizer = tmp_path / "model.safetensors", tmp_path / "tokenizer.json"
    weights.write_bytes(b"w" * 10)
    tokenizer.write_text("{}")
    first = model_identity(_config(tmp_path), "seed")
    assert model_identity(_config(tmp_path), "seed") == first
    assert model_identity(_config(tmp_path), "other seed") != first

    weights.write_bytes(b"v" * 11)
    rewritten = model_identity(_config(tmp_path), "seed")
    assert rewritten != first
    tokenizer.write_text('{"added": 1}')
    assert model_identity(_config(tmp_path), "seed") != rewritten


def test_pool_folders_of_gone_servers_are_removed(tmp_path: Path) -> None:
    gone, mine = pool_folder(4_000_123, tmp_path), pool_folder(os.getpid(), tmp_path)
    (gone / "model").mkdir(parents=True)
    (mine / "model").mkdir(parents=True)
    KVPool.sweep(tmp_path)
    assert not gone.exists() and mine.exists()


def test_the_connector_is_in_every_engine_only_when_kv_keep_bytes_is_set() -> None:
    demo = load_profile(Path(__file__).resolve().parents[2] / "profiles" / "demo.yaml")
    assert with_kv_keep(demo) is demo
    switching = msgspec.structs.replace(demo.switching, kv_keep_bytes=2**20)
    kept = with_kv_keep(msgspec.structs.replace(demo, switching=switching), 77)
    for name, model in kept.models.items():
        transfer = model.engine_args["kv_transfer_config"]
        assert transfer["kv_connector"] == TurnoutKVKeep.__name__
        assert transfer["kv_load_failure_policy"] == "recompute"
        assert transfer["kv_connector_extra_config"] == {
            "pool_root": str(pool_folder(77)),
            "limit_bytes": 2**20,
            "served_name": name,
        }


def test_kept_bytes_by_name_follow_each_models_current_identity_and_create_nothing(tmp_path: Path) -> None:
    root = tmp_path / "pool"
    assert kept_bytes_by_name(root, ["plain"]) == {} and not root.exists(), "no pool: no figures, no folder"
    pool = KVPool(root, limit_bytes=10 * BLOCK)
    pool.claim("plain", "plain-weights")
    pool.write_block("plain-weights", "a", b"x" * BLOCK)
    pool.write_block("plain-weights", "b", b"x" * BLOCK)
    pool.claim("tools", "tools-weights")

    usage = kept_bytes_by_name(root, ["plain", "tools", "never-kept"])
    assert usage == {"plain": 2 * BLOCK, "tools": 0, "never-kept": 0}
    pool.claim("plain", "new-weights")  # a reload changed its weights: its blocks are gone
    assert kept_bytes_by_name(root, ["plain"]) == {"plain": 0}
