"""Turnout's switch latency per strategy, recorded for the page beside vLLM's cold start (``cold_start.py``).

    .venv/bin/python -m benchmarks.switch_latency [--rounds 3]

The measuring lives in ``benchmarks/switch_times.py`` (its ``main()``); this step runs it, keeps what it
prints, and stores what it returns. The page reads ``strategies`` from that return value: per strategy,
``post_to_200_s`` (admin switch POST until its 200) and ``first_token_s`` (from then until a request to the new
model gets its first token). When ``main()`` returns nothing, the page shows the printed report instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import io
import sys
from typing import Any

from benchmarks import switch_times
from benchmarks.results import write_result

__all__ = ["main"]


class _Tee(io.TextIOBase):
    """Writes to the console and keeps a copy."""

    def __init__(self) -> None:
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        sys.__stdout__.write(text)  # type: ignore[union-attr]
        sys.__stdout__.flush()  # type: ignore[union-attr]
        return self.copy.write(text)


def main(rounds: int = 3) -> dict[str, Any]:
    """Run ``switch_times.main`` and write ``switch_latency.json``."""
    tee = _Tee()
    with contextlib.redirect_stdout(tee):
        returned = switch_times.main(rounds=rounds)
        if inspect.isawaitable(returned):
            returned = asyncio.run(returned)  # type: ignore[arg-type]
    data: dict[str, Any] = dict(returned) if isinstance(returned, dict) else {}
    data.setdefault("strategies", {})
    if not data["strategies"]:
        data["note"] = "switch_times.main() returned no figures; its report:\n\n```\n" + tee.copy.getvalue() + "```"
    data["output"] = tee.copy.getvalue()
    data["config"] = {"rounds": rounds}
    print(f"wrote {write_result('switch_latency', data)}")
    return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    main(parser.parse_args().rounds)
