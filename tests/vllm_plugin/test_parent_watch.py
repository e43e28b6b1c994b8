"""A process that ``multiprocessing`` spawned ends itself once its parent is killed (no orphaned engine)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from server.vllm_plugin.parent_watch import POLL_S, watch_parent

# The parent spawns a child that watches it, prints the child's pid, then waits to be killed.
_PARENT = textwrap.dedent(
    """
    import multiprocessing, sys, time

    def child():
        from server.vllm_plugin.parent_watch import watch_parent
        assert watch_parent()
        time.sleep(120)

    if __name__ == "__main__":
        proc = multiprocessing.get_context("spawn").Process(target=child)
        proc.start()
        print(proc.pid, flush=True)
        time.sleep(120)
    """
)


def test_a_process_nobody_spawned_is_not_watched() -> None:
    assert watch_parent() is False  # the test runner itself: nothing to end it with


def test_a_spawned_child_dies_soon_after_its_parent_is_killed(tmp_path: os.PathLike[str]) -> None:
    script = os.path.join(tmp_path, "parent.py")
    with open(script, "w") as handle:
        handle.write(_PARENT)
    with subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()) as parent:
        try:
            assert parent.stdout is not None
            child = psutil.Process(int(parent.stdout.readline()))
            time.sleep(POLL_S * 2)
            assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE  # alive while its parent lives
            parent.send_signal(signal.SIGKILL)
            parent.wait(10)
            killed_at = time.perf_counter()
            took = _wait_gone(child, 10.0) - killed_at
            print(f"orphan gone {took:.2f} s after its parent's SIGKILL")
            assert took < POLL_S * 4 + 1
        finally:
            if parent.poll() is None:
                parent.kill()


def _wait_gone(proc: psutil.Process, timeout: float) -> float:
    """When ``proc`` ended (a zombie counts: a container's init may never reap it); fails after ``timeout``."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return time.perf_counter()
        except psutil.NoSuchProcess:
            return time.perf_counter()
        time.sleep(0.05)
    raise AssertionError(f"process {proc.pid} outlived its parent by {timeout} s")


# A spawned child (it watches its parent) forks a grandchild as vLLM's engine core forks its worker: the grandchild
# inherits the child's module state, not its watch thread, and must watch the child itself.
_FORKING_CHILD = textwrap.dedent(
    """
    import multiprocessing, sys, time

    def grandchild():
        from server.vllm_plugin.parent_watch import watch_parent
        assert watch_parent()
        time.sleep(120)

    def child():
        from server.vllm_plugin.parent_watch import watch_parent
        assert watch_parent()
        proc = multiprocessing.get_context("fork").Process(target=grandchild)
        proc.start()
        print(proc.pid, flush=True)
        time.sleep(120)

    if __name__ == "__main__":
        proc = multiprocessing.get_context("spawn").Process(target=child)
        proc.start()
        print(proc.pid, flush=True)
        time.sleep(120)
    """
)


def test_a_process_forked_from_a_watched_one_watches_its_own_parent(tmp_path: os.PathLike[str]) -> None:
    script = os.path.join(tmp_path, "forking.py")
    with open(script, "w") as handle:
        handle.write(_FORKING_CHILD)
    with subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()) as top:
        grandchild = None
        try:
            assert top.stdout is not None
            child = psutil.Process(int(top.stdout.readline()))
            grandchild = psutil.Process(int(top.stdout.readline()))
            time.sleep(POLL_S * 2)
            assert grandchild.is_running() and grandchild.status() != psutil.STATUS_ZOMBIE
            child.kill()
            killed_at = time.perf_counter()
            took = _wait_gone(grandchild, 10.0) - killed_at
            assert took < POLL_S * 4 + 1
        finally:
            if grandchild is not None and grandchild.is_running():
                grandchild.kill()
            top.kill()
