"""Profile a server's frontend process under load with py-spy (``pip install py-spy``).

    .venv/bin/python -m benchmarks.profile_frontend --server turnout --seconds 30 --workload chat,stream,16

Starts one server (``turnout`` or ``vllm``) on the demo's ``tools`` model, keeps vLLM's benchmark client
sending the workload, and samples the server process (not its engine core) with ``py-spy record``. Writes the
collapsed stacks to ``results/logs/profile-<server>.txt`` and prints the functions with the most samples, both
inclusive and self, with site-packages paths shortened.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from benchmarks.load import Workload, run_load
from benchmarks.results import RESULTS_DIR
from benchmarks.servers import DEMO_PROFILE, served_model, start_turnout, start_vllm
from server.tinymodels.builder import build_tiny_models
from server.tinymodels.spec import REPO_ROOT

__all__ = ["main", "top_functions"]

#: A frame's file, shortened to its place in an installed package or in this repository.
_SHORTEN = re.compile(rf" \((?:/\S*?site-packages|{re.escape(str(REPO_ROOT))})/")


def top_functions(collapsed: Path, count: int = 40) -> str:
    """The ``count`` functions with the most samples (inclusive, then self) in a py-spy ``raw`` file."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        frames = [_SHORTEN.sub(" (", frame) for frame in stack.split(";")]
        total += int(samples)
        for frame in set(frames):
            inclusive[frame] += int(samples)
        own[frames[-1]] += int(samples)
    lines = [f"{total} samples", "inclusive:"]
    lines += [f"{100 * n / total:5.1f}% {frame}" for frame, n in inclusive.most_common(count)]
    lines += ["self:"] + [f"{100 * n / total:5.1f}% {frame}" for frame, n in own.most_common(count)]
    return "\n".join(lines)


def main(server_name: str, seconds: int, workload: Workload) -> Path:
    """Profile ``server_name`` for ``seconds`` under ``workload``; returns the collapsed-stack file."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    build_tiny_models()
    model = served_model(DEMO_PROFILE)
    log_dir = RESULTS_DIR / "logs"
    server = start_vllm(model, log_dir) if server_name == "vllm" else start_turnout(DEMO_PROFILE, log_dir)
    out = log_dir / f"profile-{server_name}.txt"
    stop = threading.Event()
    try:
        server.wait_ready()

        def load() -> None:
            while not stop.is_set():
                run_load(
                    workload,
                    base_url=server.url,
                    model_path=model.model.model,
                    served_name=model.name,
                    server_cpu_seconds=server.cpu_seconds,
                )

        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        sampling = ["-d", str(seconds), "-r", "100", "--nonblocking", "-f", "raw", "-o", str(out)]
        subprocess.run([py_spy, "record", "-p", str(server.pid), *sampling], check=True)
        stop.set()
        thread.join()
    finally:
        server.stop()
    print(top_functions(out))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=("turnout", "vllm"), default="turnout")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--workload", default="chat,stream,16", help="kind,stream|json,concurrency")
    options = parser.parse_args()
    kind, mode, concurrency = options.workload.split(",")
    main(options.server, options.seconds, Workload(kind, mode == "stream", int(concurrency), num_prompts=200))
