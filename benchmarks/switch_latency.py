"""Turnout's switch latency per strategy, recorded for the page beside vLLM's cold start (``cold_start.py``).

    .venv/bin/python -m benchmarks.switch_latency [--rounds 3]

The measuring lives in ``benchmarks/switch_times.py`` (its ``main()``, through the real server); this step runs
it, keeps what it prints, and turns its per-strategy ``summary`` into the page's figures: ``post_to_200_s``
(admin switch POST until its 200, warm median), ``first_token_s`` (then until a chat on the new model gets its
first token), the cold first switch and the engine start. When it measured no strategy, the page shows its
printed report instead.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys

from benchmarks import switch_times
from benchmarks.result_types import StrategyFigures, SwitchLatency, SwitchTimes, SwitchTimesOptions
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


def _seconds(milliseconds: float | None) -> float | None:
    return milliseconds / 1000 if milliseconds is not None else None


def _strategies(returned: SwitchTimes) -> dict[str, StrategyFigures]:
    """Per strategy, the page's figures in seconds, from ``switch_times``' ``summary`` (milliseconds)."""
    return {
        name: StrategyFigures(
            post_to_200_s=_seconds(figures.switch_ms),
            first_token_s=_seconds(figures.ttft_ms),
            cold_switch_s=_seconds(figures.cold_switch_ms),
            engine_start_s=figures.engine_start_s,
        )
        for name, figures in returned.summary.items()
    }


def main(options: SwitchTimesOptions | None = None) -> SwitchLatency:
    """Run ``switch_times.main`` and write ``switch_latency.json``."""
    options = options or SwitchTimesOptions()
    tee = _Tee()
    with contextlib.redirect_stdout(tee):
        returned = switch_times.main(["--rounds", str(options.rounds)])
    strategies = _strategies(returned)
    note = None
    if not strategies:
        report = [line for line in tee.copy.getvalue().splitlines() if not _VLLM_LOG.match(line)]
        note = "switch_times.main() returned no figures; its report:\n\n```\n" + "\n".join(report) + "\n```"
    data = SwitchLatency(
        strategies=strategies, config=options, switch_times=returned, note=note, output=tee.copy.getvalue()
    )
    print(f"wrote {write_result('switch_latency', data)}")
    return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=SwitchTimesOptions().rounds)
    main(SwitchTimesOptions(rounds=parser.parse_args().rounds))
