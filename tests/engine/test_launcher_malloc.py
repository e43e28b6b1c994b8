"""glibc's malloc settings of the in-place engines (``IN_PLACE_ENGINE_ENV``), read by glibc only at exec, hold in an
engine core the launcher forks as in a spawned one: a large allocation comes from the heap, its pages stay after a
free, and a trim hands them back (what the in-place worker's ``malloc_trim`` after a swap relies on)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from server.engine.runtime import EngineLauncher, LaunchedProcess
from server.vllm_plugin.protocol import IN_PLACE_ENGINE_ENV

MIB = 2**20
#: Larger than glibc's default mmap threshold (128 KiB, 32 MiB at most once dynamic), below the in-place one.
ALLOCATION = 256 * MIB


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def _malloc_probe(path: str) -> None:
    """An engine core's stand-in: one large allocation, touched, freed, then trimmed; writes down what glibc did."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2()
    pointer = libc.malloc(ALLOCATION)
    ctypes.memset(pointer, 1, ALLOCATION)  # its pages in use, as a model's tensors
    held = libc.mallinfo2()
    rss_held = _rss_mb()
    libc.free(pointer)
    rss_freed = _rss_mb()
    libc.malloc_trim(0)
    rss_trimmed = _rss_mb()
    facts = {
        "mmapped": held.hblkhd - before.hblkhd >= ALLOCATION,
        "from_heap": held.uordblks - before.uordblks >= ALLOCATION,  # in use in the arenas, not mmapped
        "kept_after_free": round(rss_held - rss_freed) < ALLOCATION // MIB // 2,
        "returned_by_trim": rss_freed - rss_trimmed >= ALLOCATION / MIB / 2,
        "rss_mb": [round(rss_held), round(rss_freed), round(rss_trimmed)],
    }
    Path(path).write_text(json.dumps(facts))


@pytest.fixture(scope="module")
def launcher() -> Iterator[EngineLauncher]:
    launcher = EngineLauncher(preload=())
    launcher.start()
    try:
        assert launcher.wait_ready(60)
        yield launcher
    finally:
        launcher.stop()


def _forked(launcher: EngineLauncher, env: Mapping[str, str | None], path: Path) -> dict[str, object]:
    process = LaunchedProcess(launcher, env, _malloc_probe, "EngineCore", kwargs={"path": str(path)})
    process.start()
    process.join(60)
    assert process.exitcode == 0
    facts: dict[str, object] = json.loads(path.read_text())
    return facts


def _spawned(env: Mapping[str, str | None], path: Path) -> dict[str, object]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    environment.update({name: value for name, value in env.items() if value is not None})
    code = f"from tests.engine.test_launcher_malloc import _malloc_probe; _malloc_probe({str(path)!r})"
    subprocess.run([sys.executable, "-c", code], env=environment, check=True, timeout=60)
    facts: dict[str, object] = json.loads(path.read_text())
    return facts


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_forked_core_gets_the_in_place_malloc_settings_as_a_spawned_one(
    launcher: EngineLauncher, tmp_path: Path
) -> None:
    spawned = _spawned(IN_PLACE_ENGINE_ENV, tmp_path / "spawned.json")
    forked = _forked(launcher, IN_PLACE_ENGINE_ENV, tmp_path / "forked.json")
    print(f"\nin-place settings: spawned {spawned}, forked {forked}")
    assert spawned["from_heap"] and not spawned["mmapped"], spawned
    assert spawned["kept_after_free"] and spawned["returned_by_trim"], spawned
    facts = ("mmapped", "from_heap", "kept_after_free", "returned_by_trim")
    assert {k: forked[k] for k in facts} == {k: spawned[k] for k in facts}


def test_a_forked_core_without_them_keeps_glibcs_defaults(launcher: EngineLauncher, tmp_path: Path) -> None:
    plain = dict.fromkeys(IN_PLACE_ENGINE_ENV)
    forked = _forked(launcher, plain, tmp_path / "forked.json")
    assert forked["mmapped"] and not forked["from_heap"], forked  # the launcher itself runs with the defaults
