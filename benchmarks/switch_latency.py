"""Turnout's switch latency per strategy, recorded for the page beside vLLM's cold start (``cold_start.py``).

    .venv/bin/python -m benchmarks.switch_latency [--rounds 3]

The measuring lives in ``benchmarks/switch_times.py`` (its ``main()``, through the real server); this step runs
it, keeps what it prints, and turns its per-strategy ``summary`` into the page's figures: ``post_to_200_s``
(admin switch POST until its 200, warm median), ``first_token_s`` (then until a chat on the new model gets its
first token), the cold first switch and the engine start. When ``main()`` returns nothing, the page shows its
printed report instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import io
import re
import sys
from typing import Any

from benchmarks import switch_times
from benchmarks.results import write_result

__all__ = ["main"]

# vLLM's own log lines (engine start-up), which it prints to stdout.
_VLLM_LOG = re.compile(r"^(\(\w+ pid=\d+\)|INFO|WARNING|DEBUG|Triton|\s*$)")


class _Tee(io.TextIOBase):
    """Writes to the console and keeps a copy."""

    def __init__(self) -> None:
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        sys.__stdout__.write(text)  # type: ignore[union-attr]
        sys.__stdout__.flush()  # type: ignore[union-attr]
        return self.copy.write(text)


def _call_switch_times(rounds: int) -> Any:
    """``switch_times.main``: the through-the-server version takes argv, the older one ``rounds``."""
    parameters = inspect.signature(switch_times.main).parameters
    if "argv" in parameters:
        returned = switch_times.main(["--rounds", str(rounds)])  # type: ignore[call-arg, arg-type, unused-ignore]
    else:
        returned = switch_times.main(rounds=rounds)  # type: ignore[call-arg, unused-ignore]
    if inspect.isawaitable(returned):
        returned = asyncio.run(returned)  # type: ignore[arg-type, unused-ignore]
    return returned


def _strategies(returned: Any) -> dict[str, dict[str, float | None]]:
    """Per strategy, the page's figures in seconds, from ``switch_times``' ``summary`` (milliseconds)."""
    summary = returned.get("summary", {}) if isinstance(returned, dict) else {}

    def seconds(value: Any) -> float | None:
        return float(value) / 1000 if value is not None else None

    return {
        name: {
            "post_to_200_s": seconds(figures.get("switch_ms")),
            "first_token_s": seconds(figures.get("ttft_ms")),
            "cold_switch_s": seconds(figures.get("cold_switch_ms")),
            "engine_start_s": figures.get("engine_start_s"),
        }
        for name, figures in summary.items()
    }


def main(rounds: int = 3) -> dict[str, Any]:
    """Run ``switch_times.main`` and write ``switch_latency.json``."""
    tee = _Tee()
    with contextlib.redirect_stdout(tee):
        returned = _call_switch_times(rounds)
    data: dict[str, Any] = {"strategies": _strategies(returned), "config": {"rounds": rounds}}
    if isinstance(returned, dict):
        data["switch_times"] = returned
    if not data["strategies"]:
        report = [line for line in tee.copy.getvalue().splitlines() if not _VLLM_LOG.match(line)]
        data["note"] = "switch_times.main() returned no figures; its report:\n\n```\n" + "\n".join(report) + "\n```"
    data["output"] = tee.copy.getvalue()
    print(f"wrote {write_result('switch_latency', data)}")
    return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    main(parser.parse_args().rounds)
