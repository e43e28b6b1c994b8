"""One engine's own memory: what ``ENGINE_OVERHEAD_BYTES`` (``server/profiles/footprint.py``) stands for.

    .venv/bin/python -m benchmarks.engine_overhead [--kv-mib 64]

Starts ``turnout serve`` with one tiny model and a fixed KV cache, then sums the USS and RSS of its engine
processes (every descendant of the server) and takes away the weights (safetensors headers) and the KV cache.
USS is what the engines hold alone; RSS adds the shared libraries (page cache, which vLLM counts as available).
Run it on the platform whose figure you want (the CUDA and HPU figures are estimates until someone does).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.servers import start_turnout
from server.profiles.checkpoint_size import checkpoint_weight_bytes
from server.tinymodels.builder import build_tiny_models

__all__ = ["main"]

_MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-mib", type=int, default=64, help="the engine's KV cache (MiB)")
    args = parser.parse_args()
    model = build_tiny_models()["tiny-plain"]
    kv = args.kv_mib * _MIB
    with tempfile.TemporaryDirectory() as folder:
        profile = Path(folder) / "overhead.yaml"
        profile.write_text(
            f"models:\n  plain:\n    model: {model}\n    max_model_len: 512\n    kv_cache_memory_bytes: {kv}\n"
            "switching:\n  strategy: stop\n"
        )
        server = start_turnout(profile, Path(folder), extra=("--no-preload",), env={"TURNOUT_ADMIN_TOKEN": "x" * 32})
        try:
            server.wait_ready()
            time.sleep(5)  # let the engine settle after its warm-up
            uss = rss = 0
            for child in psutil.Process(server.pid).children(recursive=True):
                info = child.memory_full_info()
                uss, rss = uss + info.uss, rss + info.rss
        finally:
            server.stop()
    weights = checkpoint_weight_bytes(model)
    print(f"engine processes: USS {uss / _MIB:,.0f} MiB, RSS {rss / _MIB:,.0f} MiB")
    print(f"weights {weights / _MIB:.1f} MiB, KV cache {kv / _MIB:.0f} MiB")
    print(f"overhead: USS {(uss - weights - kv) / _MIB:,.0f} MiB, RSS {(rss - weights - kv) / _MIB:,.0f} MiB")


if __name__ == "__main__":
    main()
