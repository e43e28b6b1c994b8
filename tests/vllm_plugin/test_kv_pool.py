"""The kept-KV pool on its own: bound, least-recently-used order across models, identity, clean-up, and its
privacy against another local user (the planting steps run as ``nobody``) and another container's server."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from server.profiles import load_profile
from server.vllm_plugin import with_kv_keep
from server.vllm_plugin.checkpoint_content import ContentDigests
from server.vllm_plugin.kv_keep import TurnoutKVKeep
from server.vllm_plugin.kv_keep_core import kv_transfer_config
from server.vllm_plugin.kv_pool import KVPool, kept_bytes_by_name, model_identity
from server.vllm_plugin.kv_pool_owner import LOCK_NAME, PoolOwner, sweep_dead_pools
from server.vllm_plugin.private_folder import FolderNotPrivate, check_private
from tests.fakes.local_user import as_nobody, can_plant, plant_beside_pools, planted_tree

PAGE = 4096
#: A block's bytes and its 16-byte digest fill one tmpfs page: a block file's size and the memory it takes agree.
BLOCK = PAGE - 16


def ident(name: str) -> str:
    """A model identity as the pool takes it (32 hex digits)."""
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def key(name: str) -> str:
    """A block key as the pool takes it (vLLM's sha256 block hash: 64 hex digits)."""
    return hashlib.sha256(name.encode()).hexdigest()


def private(folder: Path) -> Path:
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture
def shm() -> Iterator[Path]:
    """A sticky, world-writable folder on tmpfs, as ``/dev/shm`` is (nobody can reach it), removed afterwards."""
    if not can_plant():
        pytest.skip("planting as another user needs root and a system python3")
    folder = Path(tempfile.mkdtemp(prefix="shm-test-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _aged(pool: KVPool, identity: str, name: str, age_s: float) -> None:
    pool.write_block(identity, key(name), b"x" * BLOCK)
    past = time.time() - age_s
    os.utime(pool.model_dir(identity) / key(name), (past, past))


def test_the_bound_holds_across_models_and_the_least_recently_used_go_first(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=5 * PAGE)
    m = [ident(f"m{model}") for model in range(4)]
    for model in range(4):  # 12 blocks of 4 models, the oldest first
        for block in range(3):
            _aged(pool, m[model], f"b{block}", age_s=100 - (model * 3 + block))
    pool.read_block(m[0], key("b0"), BLOCK)  # used just now: the youngest

    pool.enforce_bound()

    assert sum(pool.usage().values()) <= 5 * PAGE
    assert pool.has_block(m[0], key("b0"))
    assert all(pool.has_block(m[3], key(f"b{block}")) for block in range(3))
    assert not pool.has_block(m[0], key("b1")) and not pool.has_block(m[1], key("b0"))


def test_room_is_made_before_a_write(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=5 * PAGE)
    for block in range(5):
        _aged(pool, ident("m"), f"b{block}", age_s=100 - block)
    pool.make_room(2 * PAGE)
    assert sum(pool.usage().values()) <= 3 * PAGE, "two more blocks fit in the bound before they are written"
    assert not pool.has_block(ident("m"), key("b0")) and pool.has_block(ident("m"), key("b4"))


def test_free_tmpfs_is_checked(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=5 * PAGE)
    fs = os.statvfs(pool.root)
    assert pool.leaves_free(BLOCK)
    assert not pool.leaves_free(fs.f_bavail * fs.f_frsize), "a keep that would fill the file system is refused"


def test_a_short_block_and_names_that_are_not_hex_are_refused(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=10 * PAGE)
    pool.write_block(ident("m"), key("k"), b"x" * (BLOCK - 1))
    with pytest.raises(ValueError, match="another size"):
        pool.read_block(ident("m"), key("k"), BLOCK)
    with pytest.raises(OSError):
        pool.read_block(ident("m"), key("gone"), BLOCK)
    for identity, name in [("../x", key("k")), ("/tmp", key("k")), (ident("m"), "../../etc/passwd"), ("names", "a")]:
        with pytest.raises(ValueError, match="not a kept-KV pool name"):
            pool.write_block(identity, name, b"x")
    with pytest.raises(ValueError, match="not a kept-KV pool name"):
        pool.claim("plain", "/etc")


def test_the_kv_drill_flips_a_byte_as_a_block_is_read_and_its_digest_refuses_it(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=10 * PAGE)
    pool.write_block(ident("m"), key("k"), b"x" * BLOCK)
    assert pool.read_block(ident("m"), key("k"), BLOCK) == b"x" * BLOCK
    with pytest.raises(ValueError, match="does not match its digest"):
        pool.read_block(ident("m"), key("k"), BLOCK, flip=True)  # --inject-fault kv:MODEL: a miss, never an answer
    config = kv_transfer_config(tmp_path, 2**20, "plain", flip_bytes=True)
    assert config["kv_connector_extra_config"]["fault_flip_bytes"] is True


def test_a_model_whose_identity_changed_loses_its_blocks(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=10 * PAGE)
    pool.claim("plain", ident("old-weights"))
    pool.write_block(ident("old-weights"), key("k"), b"x")
    pool.claim("other", ident("other-weights"))
    pool.write_block(ident("other-weights"), key("k"), b"x")

    pool.claim("plain", ident("new-weights"))

    assert not pool.has_block(ident("old-weights"), key("k"))
    assert pool.has_block(ident("other-weights"), key("k"))


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


def test_the_connector_is_in_every_engine_only_when_kv_keep_bytes_is_set(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    demo = load_profile(Path(__file__).resolve().parents[2] / "profiles" / "demo.yaml")
    assert with_kv_keep(demo) is demo
    switching = msgspec.structs.replace(demo.switching, kv_keep_bytes=2**20)
    cache = tmp_path / "state" / "content-digests.json"
    kept = with_kv_keep(msgspec.structs.replace(demo, switching=switching), tmp_path, cache)
    for name, model in kept.models.items():
        transfer = model.engine_args["kv_transfer_config"]
        assert transfer["kv_connector"] == TurnoutKVKeep.__name__
        assert transfer["kv_load_failure_policy"] == "recompute"
        assert transfer["kv_connector_extra_config"] == {
            "pool_root": str(tmp_path),
            "limit_bytes": 2**20,
            "served_name": name,
            # The digests outlive the pool's folder (removed at the server's stop): a restart hashes nothing again.
            "digest_cache": str(cache),
        }


def test_kept_bytes_by_name_follow_each_models_current_identity_and_create_nothing(tmp_path: Path) -> None:
    root = tmp_path / "pool"
    assert kept_bytes_by_name(root, ["plain"]) == {} and not root.exists(), "no pool: no figures, no folder"
    pool = KVPool(private(root), limit_bytes=10 * PAGE)
    pool.claim("plain", ident("plain-weights"))
    pool.write_block(ident("plain-weights"), key("a"), b"x" * BLOCK)
    pool.write_block(ident("plain-weights"), key("b"), b"x" * BLOCK)
    pool.claim("tools", ident("tools-weights"))

    usage = kept_bytes_by_name(root, ["plain", "tools", "never-kept"])
    assert usage == {"plain": 2 * PAGE, "tools": 0, "never-kept": 0}
    pool.claim("plain", ident("new-weights"))  # a reload changed its weights: its blocks are gone
    assert kept_bytes_by_name(root, ["plain"]) == {"plain": 0}


# -- privacy: planted folders, links, records and files --------------------------------------------------------


def test_a_pool_folder_that_is_not_private_is_refused(tmp_path: Path, shm: Path) -> None:
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(private(tmp_path / "target"))
    planted = shm / "turnout-kv-planted"
    as_nobody(f"import os; os.mkdir({str(planted)!r}, 0o700)")
    for folder in (open_to_all, link, planted, tmp_path / "missing"):
        with pytest.raises(OSError):
            KVPool(folder, limit_bytes=BLOCK)
    with pytest.raises(FolderNotPrivate, match="not a folder"):
        check_private(link)
    with pytest.raises(FolderNotPrivate, match="belongs to uid"):
        check_private(planted)
    with pytest.raises(FolderNotPrivate, match="mode 777"):
        check_private(open_to_all)


def test_a_planted_record_naming_a_folder_outside_removes_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=10 * PAGE)
    pool.claim("plain", ident("w"))
    record = pool.root / "names" / hashlib.sha256(b"plain").hexdigest()[:32]
    for planted in (str(victim), "../victim"):
        record.write_text(planted)
        pool.claim("plain", ident("w2"))
        assert (victim / "precious").read_text() == "keep me"
    record.unlink()
    record.symlink_to(victim / "precious")  # a record that is a link is replaced, its target left
    pool.claim("plain", ident("w3"))
    assert (victim / "precious").read_text() == "keep me" and not record.is_symlink()


def test_links_in_the_pool_are_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    for i in range(3):
        (victim / key(f"v{i}")).write_bytes(b"v" * BLOCK)
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=BLOCK)
    (pool.root / ident("linked")).symlink_to(victim)  # a linked model folder
    pool.write_block(ident("m"), key("b"), b"x" * BLOCK)
    (pool.model_dir(ident("m")) / key("linked")).symlink_to(victim / key("v0"))  # a linked block

    pool.enforce_bound()
    pool.make_room(10 * BLOCK)
    pool.claim("plain", ident("linked"))
    pool.claim("plain", ident("other"))  # drops the linked folder: the link goes, not what it names

    assert sorted(p.name for p in victim.iterdir()) == sorted(key(f"v{i}") for i in range(3))
    with pytest.raises(OSError):
        pool.read_block(ident("m"), key("linked"), BLOCK)
    assert not pool.has_block(ident("m"), key("linked"))
    assert shutil.rmtree.avoids_symlink_attacks, "the removal of a model folder walks it by descriptors"


def test_a_sparse_file_counts_the_memory_it_takes(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=4 * PAGE)
    for block in range(3):
        _aged(pool, ident("m"), f"b{block}", age_s=100 - block)
    with (pool.model_dir(ident("m")) / key("sparse")).open("wb") as f:
        f.truncate(10 * 2**30)  # 10 GiB stated, nothing taken: the youngest file
    pool.enforce_bound()
    assert all(pool.has_block(ident("m"), key(f"b{block}")) for block in range(3)), "the kept blocks survive"
    assert sum(pool.usage().values()) < 4 * PAGE


def test_another_user_cannot_plant_or_take_over_a_pool(shm: Path) -> None:
    victim = plant_beside_pools(shm, "t")
    planted_before = planted_tree(shm, "t")
    owner = PoolOwner(shm)  # sweeps first: nobody's folder and link are not ours
    try:
        assert owner.root.parent == shm and owner.root.name.startswith("turnout-kv-")
        assert not owner.root.name.startswith(("turnout-kv-planted", "turnout-kv-link"))
        assert stat.S_IMODE(owner.root.stat().st_mode) == 0o700 and owner.root.stat().st_uid == os.geteuid()
        pool = KVPool(owner.root, limit_bytes=2 * PAGE)
        pool.claim("plain", ident("plain-weights"))
        pool.write_block(ident("plain-weights"), key("b"), b"x" * BLOCK)
        pool.enforce_bound()
        assert pool.read_block(ident("plain-weights"), key("b"), BLOCK) == b"x" * BLOCK, "the keep still works"
        with pytest.raises(subprocess.CalledProcessError):  # nobody cannot look into the pool, nor write in it
            as_nobody(f"import os; os.listdir({str(owner.root)!r})")
        with pytest.raises(subprocess.CalledProcessError):
            as_nobody(f"open({str(owner.root / 'names' / 'x')!r}, 'w')")
    finally:
        owner.remove()
    assert not owner.root.exists()
    assert (victim / "precious").read_text() == "keep me"
    assert planted_tree(shm, "t") == planted_before


# -- the owner: lock, sweep, removal --------------------------------------------------------------------------


def _hold_lock(folder: Path) -> subprocess.Popen[bytes]:
    """Another process (a live server in another container) holding ``folder``'s lock until killed."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)",
            str(folder / LOCK_NAME),
        ],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


def test_the_sweep_removes_only_pools_whose_lock_nobody_holds(tmp_path: Path) -> None:
    def pool_folder(name: str, *, lock: bool = True) -> Path:
        folder = private(tmp_path / f"turnout-kv-{name}")
        (folder / "names").mkdir()
        if lock:
            (folder / LOCK_NAME).touch()
        return folder

    live, dead, unlocked_new, unlocked_old = (
        pool_folder("live"),
        pool_folder("dead"),
        pool_folder("new", lock=False),
        pool_folder("old", lock=False),
    )
    os.utime(unlocked_old, (time.time() - 3600, time.time() - 3600))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").touch()
    (tmp_path / "turnout-kv-link").symlink_to(outside)
    holder = _hold_lock(live)
    try:
        assert sorted(p.name for p in sweep_dead_pools(tmp_path)) == ["turnout-kv-dead", "turnout-kv-old"]
        assert live.exists() and unlocked_new.exists() and not dead.exists() and not unlocked_old.exists()
        assert (outside / "precious").exists() and (tmp_path / "turnout-kv-link").is_symlink()
    finally:
        holder.kill()
        holder.communicate()
    assert [p.name for p in sweep_dead_pools(tmp_path)] == ["turnout-kv-live"], "its server is gone now"


def test_the_sweep_never_touches_another_users_folder(shm: Path) -> None:
    as_nobody(f"import os; os.mkdir({str(shm / 'turnout-kv-theirs')!r}, 0o700); open({str(shm)!r} + '/x', 'w')")
    assert sweep_dead_pools(shm) == [] and (shm / "turnout-kv-theirs").is_dir()


def test_two_owners_never_share_or_sweep_each_others_pool(tmp_path: Path) -> None:
    first = PoolOwner(tmp_path)
    second = PoolOwner(tmp_path)  # another server (or container) on the same tmpfs: its sweep finds a held lock
    try:
        assert first.root != second.root and first.root.exists() and second.root.exists()
    finally:
        first.remove()
        second.remove()
    assert not first.root.exists() and not second.root.exists()


def _owner_script(tmp_path: Path, then: str) -> str:
    return (
        "import os, signal, time\n"
        "from pathlib import Path\n"
        "from server.vllm_plugin.kv_pool_owner import PoolOwner\n"
        f"owner = PoolOwner(Path({str(tmp_path)!r}))\n"
        "print(owner.root, flush=True)\n" + then
    )


@pytest.mark.parametrize(
    ("then", "code"),
    [("", 0), ("raise SystemExit(3)\n", 3)],
    ids=["normal exit", "SystemExit"],
)
def test_the_pool_is_removed_when_its_process_exits(tmp_path: Path, then: str, code: int) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _owner_script(tmp_path, then)],
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert run.returncode == code, run.stderr
    assert not Path(run.stdout.decode().strip()).exists()


def test_a_pool_is_removed_by_its_owner_only(tmp_path: Path) -> None:
    owner = PoolOwner(tmp_path)
    pid = os.fork()
    if pid == 0:  # a forked child (as an engine process may be) exits without removing its parent's pool
        owner.remove()
        os._exit(0)
    os.waitpid(pid, 0)
    assert owner.root.exists()
    owner.remove()
    assert not owner.root.exists()


def test_the_pools_figures_are_read_at_most_every_few_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from server.vllm_plugin import kv_pool_owner

    scans: list[int] = []
    real: Callable[..., dict[str, int]] = kv_pool_owner.kept_bytes_by_name

    def counted(root: Path, names: list[str]) -> dict[str, int]:
        scans.append(1)
        return real(root, names)

    monkeypatch.setattr(kv_pool_owner, "kept_bytes_by_name", counted)
    owner = PoolOwner(tmp_path, usage_ttl_s=60.0)
    try:
        for _ in range(100):  # 100 scrapes of /metrics and /status
            assert owner.kept_bytes(["plain"]) == {"plain": 0}
        assert len(scans) == 1
    finally:
        owner.remove()
    assert owner.kept_bytes(["plain"]) == {}, "a removed pool has no figures"


# -- the keep step: room before the write ---------------------------------------------------------------------


def _core(pool: KVPool, hashes: list[bytes], written: list[int]) -> SimpleNamespace:
    """An engine core whose prefix cache holds ``hashes`` (free blocks) of one page each; its workers record the
    pool's usage when they are asked to write, then write."""
    connector = object.__new__(TurnoutKVKeep)
    connector.pool, connector.identity, connector.num_blocks = pool, ident("m"), len(hashes)
    connector.single_group, connector.shards = True, 1
    blocks = [
        SimpleNamespace(block_id=i, ref_cnt=0, block_hash=h + b"\0\0\0\0", is_null=False) for i, h in enumerate(hashes)
    ]
    block_pool = SimpleNamespace(blocks=blocks, free_block_queue=SimpleNamespace(get_all_free_blocks=lambda: blocks))
    group = SimpleNamespace(kv_cache_spec=SimpleNamespace(page_size_bytes=BLOCK), layer_names=["layer"])

    def collective_rpc(_: object, kwargs: dict[str, object]) -> list[dict[str, float]]:
        written.append(sum(pool.usage().values()))
        for _, name in kwargs["blocks"]:  # type: ignore[attr-defined]
            pool.write_block(ident("m"), name, b"k" * BLOCK)
        return [{"kept_bytes": float(BLOCK * len(kwargs["blocks"]))}]  # type: ignore[arg-type]

    scheduler = SimpleNamespace(
        connector=connector,
        kv_cache_manager=SimpleNamespace(block_pool=block_pool),
        kv_cache_config=SimpleNamespace(kv_cache_groups=[group]),
    )
    return SimpleNamespace(scheduler=scheduler, collective_rpc=collective_rpc)


def test_a_keep_makes_room_before_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from server.vllm_plugin.kv_keep import keep_kv

    pool = KVPool(private(tmp_path / "pool"), limit_bytes=4 * PAGE)
    for block in range(4):  # full of older blocks
        _aged(pool, ident("old"), f"o{block}", age_s=100 - block)
    hashes = [hashlib.sha256(f"new{i}".encode()).digest() for i in range(2)]
    before_write: list[int] = []

    kept = keep_kv(_core(pool, hashes, before_write))

    assert kept["kept_blocks"] == 2.0
    assert before_write == [2 * PAGE], "two old blocks went before the two new ones were written"
    assert sum(pool.usage().values()) <= 4 * PAGE
    assert all(pool.has_block(ident("m"), h.hex()) for h in hashes)

    monkeypatch.setattr(KVPool, "leaves_free", lambda self, incoming: False)  # a nearly full /dev/shm
    more = [hashlib.sha256(f"more{i}".encode()).digest() for i in range(2)]
    skipped: list[int] = []
    assert keep_kv(_core(pool, more, skipped))["kept_blocks"] == 0.0
    assert skipped == [] and not any(pool.has_block(ident("m"), h.hex()) for h in more), "nothing was written"


def test_a_checkpoint_rewritten_with_the_same_sizes_and_times_changes_its_identity(tmp_path: Path) -> None:
    # cp -p, rsync -a or a tar extract of a same-shape fine-tune: every stamp but the content is kept.
    model, cache = tmp_path / "model", tmp_path / "digests.json"
    weights = model / "model.safetensors"
    shard = model / "shards" / "part-1.safetensors"  # a subfolder counts too
    shard.parent.mkdir(parents=True)
    for path in (weights, shard):
        path.write_bytes(b"w" * 64)
    (model / "tokenizer.json").write_text("{}")
    digests = ContentDigests(cache)
    first = model_identity(_config(model), "seed", digests)
    assert cache.exists()
    assert model_identity(_config(model), "seed", ContentDigests(cache)) == first

    for path, content in ((weights, b"v" * 64), (shard, b"s" * 64)):
        stamp = path.stat()
        path.write_bytes(content)
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        assert (path.stat().st_size, path.stat().st_mtime_ns) == (stamp.st_size, stamp.st_mtime_ns)
        # A cache written before the rewrite does not hide it: the change time moved.
        changed = model_identity(_config(model), "seed", ContentDigests(cache))
        assert changed != first
        first = changed


def test_an_untouched_file_is_not_hashed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, cache = tmp_path / "model", tmp_path / "digests.json"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w" * 64)
    model_identity(_config(model), "seed", ContentDigests(cache))
    hashed: list[object] = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda *args: hashed.append(args) or real(*args))
    model_identity(_config(model), "seed", ContentDigests(cache))
    assert hashed == []


def test_a_block_that_does_not_match_its_digest_is_a_miss(tmp_path: Path) -> None:
    pool = KVPool(private(tmp_path / "pool"), limit_bytes=4 * PAGE)
    pool.write_block(ident("m"), key("a"), b"a" * BLOCK)
    pool.write_block(ident("m"), key("b"), b"b" * BLOCK)
    assert pool.read_block(ident("m"), key("a"), BLOCK) == b"a" * BLOCK
    folder = pool.model_dir(ident("m"))

    flipped = bytearray((folder / key("a")).read_bytes())
    flipped[7] ^= 0xFF  # a byte changed in place: same size, same name
    (folder / key("a")).write_bytes(flipped)
    with pytest.raises(ValueError, match="digest"):
        pool.read_block(ident("m"), key("a"), BLOCK)

    shutil.copyfile(folder / key("b"), folder / key("c"))  # a whole, valid block under another block's name
    with pytest.raises(ValueError, match="digest"):
        pool.read_block(ident("m"), key("c"), BLOCK)
    assert pool.read_block(ident("m"), key("b"), BLOCK) == b"b" * BLOCK
