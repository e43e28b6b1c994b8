"""A process that ``multiprocessing`` spawned exits without the collector's passes over its heap, without Ray's
exit hook when it is not connected to Ray, and writes nothing more to stderr once its exit hooks begin.

The child stands in for an engine process: Ray is a stand-in module (its exit hook writes a file, as the real one
imports ``ray.dag``), and an exit hook registered before Turnout's (as vLLM's and torch's are) reports what it sees
when it runs after it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from server.vllm_plugin.quick_exit import exit_quickly

_PARENT = textwrap.dedent(
    """
    import multiprocessing, sys

    def child(out, connected):
        import atexit, gc, types

        def earlier_hook():  # registered before Turnout's, so it runs after it
            with open(out + "/earlier", "w") as file:
                file.write(f"frozen={gc.get_freeze_count() > 0}")
            print("written to stderr after the exit hooks began", file=sys.stderr)

        atexit.register(earlier_hook)
        ray_worker = types.ModuleType("ray._private.worker")
        ray_worker.global_worker = types.SimpleNamespace(connected=connected)
        ray_worker.shutdown = lambda: open(out + "/ray-shutdown", "w").close()
        atexit.register(ray_worker.shutdown)  # as `import ray` does
        sys.modules["ray._private.worker"] = ray_worker
        from server.vllm_plugin.quick_exit import exit_quickly
        assert exit_quickly() and exit_quickly()  # idempotent
        print("the child's own stderr", file=sys.stderr, flush=True)

    if __name__ == "__main__":
        proc = multiprocessing.get_context("spawn").Process(target=child, args=(sys.argv[1], sys.argv[2] == "1"))
        proc.start()
        proc.join(60)
        sys.exit(proc.exitcode)
    """
)


def _run_child(tmp_path: Path, *, connected: bool) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    command = [sys.executable, str(script), str(tmp_path), "1" if connected else "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


def test_a_process_nobody_spawned_is_left_alone() -> None:
    assert exit_quickly() is False  # the test runner itself


def test_a_spawned_process_exits_frozen_quiet_and_without_an_idle_rays_hook(tmp_path: Path) -> None:
    done = _run_child(tmp_path, connected=False)
    assert (tmp_path / "earlier").read_text() == "frozen=True", "the heap was frozen before the other exit hooks"
    assert not (tmp_path / "ray-shutdown").exists(), "Ray's exit hook ran in a process not connected to Ray"
    assert "the child's own stderr" in done.stderr
    assert "after the exit hooks began" not in done.stderr


def test_a_process_connected_to_ray_keeps_rays_exit_hook(tmp_path: Path) -> None:
    _run_child(tmp_path, connected=True)
    assert (tmp_path / "ray-shutdown").exists()
