"""Switch times of the ``keep`` and ``stop`` strategies on real tiny vLLM engines, measured side by side.

    .venv/bin/python benchmarks/switch_times.py [--rounds 3]

Prints each switch's report and, per strategy, the median switch time and the stop/keep ratio. Absolute numbers
depend on the machine (engine start-up dominates ``stop``); compare the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from server.engine import EngineManager
from server.engine.strategies import KeepStrategy, StopStrategy, SwitchStrategy
from server.engine.vllm_loader import VllmEngineLoader
from server.profiles.schema import ModelProfile
from server.tinymodels.builder import build_tiny_models

ENGINE_ARGS = {
    "max_model_len": 512,
    "max_num_seqs": 8,
    "kv_cache_memory_bytes": 64 << 20,
    "enforce_eager": True,
}


async def _name_bundle(name: str, profile: ModelProfile, engine: Any) -> str:
    return name


async def measure(strategy: SwitchStrategy, models: dict[str, ModelProfile], rounds: int) -> list[float]:
    manager: EngineManager[str] = EngineManager(models, strategy, _name_bundle)
    durations: list[float] = []
    try:
        await manager.initialize("tools")
        for index in range(rounds * 2):
            report = await manager.switch("plain" if index % 2 == 0 else "tools")
            print(
                f"  {strategy.name}: {report.previous_model} -> {report.current_model}: "
                f"{report.duration_ms:.0f} ms, memory {report.memory_before_mb} -> {report.memory_after_unload_mb} MB"
            )
            durations.append(report.duration_ms)
    finally:
        await manager.shutdown()
    return durations


async def main(rounds: int) -> None:
    paths = build_tiny_models()
    models = {
        "tools": ModelProfile(model=str(paths["tiny-tools"]), engine_args=ENGINE_ARGS),
        "plain": ModelProfile(model=str(paths["tiny-plain"]), engine_args=ENGINE_ARGS),
    }
    keep = await measure(KeepStrategy(VllmEngineLoader()), models, rounds)
    stop = await measure(StopStrategy(VllmEngineLoader()), models, rounds)
    # The first keep switch loads the second engine; later ones are pointer swaps.
    keep_warm = keep[1:] or keep
    print(f"keep: first switch {keep[0]:.0f} ms (loads plain), then median {statistics.median(keep_warm):.1f} ms")
    print(f"stop: median {statistics.median(stop):.0f} ms")
    print(f"ratio stop/keep (warm): {statistics.median(stop) / max(statistics.median(keep_warm), 0.001):.0f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(main(parser.parse_args().rounds))
