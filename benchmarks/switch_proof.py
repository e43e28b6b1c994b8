"""What a switch's proof costs (``switching.verify``), and what identity by content and block digests cost at 1 GiB.

    .venv/bin/python -m benchmarks.switch_proof [--rounds 3] [--gib 1]

Two ``turnout serve`` runs of the demo models under ``reconfigure``, side by side: ``verify: off`` and ``verify:
fast_paths``; each times ``plain <-> tools`` switches (``POST /v1/models/switch`` until its 200; a request follows
each, as in use) after a warm-up pair, and the second reads each switch's proof (``verify.duration_ms``). It prints
the probe's median beside the warm switch with ``verify: off`` and as a share of it (the goals: at most 50 ms and
15 %).

Then, on one file of ``--gib`` GiB in a private temporary folder: its content digest first (hashed) and cached (a
``stat`` against the state folder's cache, what a restart pays), and the kept blocks' digests over as many bytes
(2 MiB blocks). Absolute numbers depend on the machine and on what else runs on it; compare the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.result_types import Base, Result
from benchmarks.results import write_result
from benchmarks.servers import first_token_seconds, start_turnout
from benchmarks.switch_times import TOKEN, demo_profile, post_switch
from server.vllm_plugin import ContentDigests
from server.vllm_plugin.kv_pool import block_digest

__all__ = ["SwitchProof", "SwitchProofOptions", "main", "page_section"]

#: The issue's goals: the probe at most this many ms, and at most this share of a warm tiny reconfigure switch.
GOAL_PROBE_MS = 50.0
GOAL_SHARE = 0.15
_BLOCK_BYTES = 2 * 2**20


class SwitchProofOptions(Base, frozen=True, kw_only=True):
    """The command line's defaults (``run_all`` spells them out)."""

    rounds: int = 3
    gib: float = 1.0


class SwitchProof(Result, frozen=True, kw_only=True):
    """The proof's cost beside a warm switch, and the digests' at ``gib`` GiB (all times in ms, medians)."""

    rounds: int
    switch_off_ms: float
    switch_verified_ms: float
    probe_ms: float
    probe_share: float
    outcomes: list[str]
    gib: float
    content_digest_first_ms: float
    content_digest_cached_ms: float
    block_digests_ms: float
    goals: dict[str, bool]


def _switches(verify: str, rounds: int, folder: Path) -> tuple[list[float], list[dict[str, Any]]]:
    """Warm ``plain <-> tools`` switch times under ``reconfigure`` with ``verify``, and their proofs."""
    profile = demo_profile("reconfigure", folder)
    text = profile.read_text().replace('"drain_timeout": 30}', f'"drain_timeout": 30, "verify": "{verify}"}}')
    profile.write_text(text)
    server = start_turnout(
        profile,
        folder,
        label=f"serve-verify-{verify}",
        extra=("--log-level", "warning"),
        env={"TURNOUT_ADMIN_TOKEN": TOKEN, "XDG_STATE_HOME": str(folder / f"state-{verify}")},
    )
    times: list[float] = []
    proofs: list[dict[str, Any]] = []
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=600) as client:
            first_token_seconds(client, "tools")
            for index in range(2 + rounds * 2):  # the first pair warms both models up (fingerprints recorded)
                target = "plain" if index % 2 == 0 else "tools"
                switch_ms, report = post_switch(client, target, TOKEN)
                # Each model serves a request after its switch, in both runs: an engine that served costs its
                # next swap more than one that never did, and a proof is such a request.
                first_token_seconds(client, target)
                if index >= 2:
                    times.append(switch_ms)
                    if report.get("verify"):
                        proofs.append(report["verify"])
                print(f"  verify {verify:<10} -> {target:<5} {switch_ms:8.1f} ms  {report.get('verify')}", flush=True)
    finally:
        server.stop()
    return times, proofs


def _digests(gib: float) -> tuple[float, float, float]:
    """A ``gib`` GiB file's content digest first and cached, and its bytes' block digests, in ms."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o700)
        path = Path(folder) / "model.safetensors"
        block = os.urandom(_BLOCK_BYTES)
        blocks = max(1, int(gib * 2**30 / _BLOCK_BYTES))
        with path.open("wb") as out:
            for _ in range(blocks):
                out.write(block)
        cache = Path(folder) / "content-digests.json"
        started = time.perf_counter()
        first = ContentDigests(cache)
        first.digest(path)
        first.save()
        first_ms = (time.perf_counter() - started) * 1000.0
        started = time.perf_counter()
        ContentDigests(cache).digest(path)  # a restart: the cache file read, the file's stat key checked
        cached_ms = (time.perf_counter() - started) * 1000.0
        started = time.perf_counter()
        for index in range(blocks):
            block_digest("0" * 32, f"{index:032x}", block)
        blocks_ms = (time.perf_counter() - started) * 1000.0
    return first_ms, cached_ms, blocks_ms


def main(options: SwitchProofOptions) -> SwitchProof:
    """Measure, print and write ``results/switch_proof.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        off, _ = _switches("off", options.rounds, Path(tmp))
        verified, proofs = _switches("fast_paths", options.rounds, Path(tmp))
    first_ms, cached_ms, blocks_ms = _digests(options.gib)
    off_ms, verified_ms = statistics.median(off), statistics.median(verified)
    probe_ms = statistics.median(float(proof["duration_ms"]) for proof in proofs) if proofs else float("nan")
    share = probe_ms / off_ms
    result = SwitchProof(
        rounds=options.rounds,
        switch_off_ms=round(off_ms, 1),
        switch_verified_ms=round(verified_ms, 1),
        probe_ms=round(probe_ms, 1),
        probe_share=round(share, 3),
        outcomes=sorted({f"{proof['path']}: {proof['outcome']}" for proof in proofs}),
        gib=options.gib,
        content_digest_first_ms=round(first_ms, 1),
        content_digest_cached_ms=round(cached_ms, 2),
        block_digests_ms=round(blocks_ms, 1),
        goals={f"probe <= {GOAL_PROBE_MS:g} ms": probe_ms <= GOAL_PROBE_MS, "probe share <= 15 %": share <= GOAL_SHARE},
    )
    print()
    for line in page_section(result)[2:]:
        print(line)
    write_result("switch_proof", result)
    return result


def page_section(data: SwitchProof | None) -> list[str]:
    """The docs page's section (``benchmarks/docs_page.py``): the proof among the switch phases, then the digests."""
    lines = ["## A switch's proof, and identity by content", ""]
    if data is None:
        return [*lines, "**Not measured** in this run (`python -m benchmarks.switch_proof`).", ""]
    return [
        *lines,
        f"Measured {data.machine.date} (commit `{data.machine.turnout_commit}`), warm demo-model switches under "
        f"`reconfigure`, medians of {data.rounds * 2}:",
        "",
        "| | ms |",
        "|---|---|",
        f"| switch, `verify: off` | {data.switch_off_ms} |",
        f"| switch, `verify: fast_paths` | {data.switch_verified_ms} |",
        f"| the proof (probe and comparison) | **{data.probe_ms}** ({data.probe_share:.0%} of the switch with `off`) |",
        "",
        f"Proofs seen: {', '.join(data.outcomes) or 'none'}.",
        "",
        f"At {data.gib:g} GiB of checkpoint: its content digest (BLAKE2b) **{data.content_digest_first_ms} ms** "
        f"the first time, **{data.content_digest_cached_ms} ms** once cached in the state folder (a restart); the "
        f"kept blocks' digests over as many bytes (2 MiB blocks) **{data.block_digests_ms} ms**.",
        "",
        *[f"- **{'Met' if met else 'MISSED'}**: {goal}" for goal, met in data.goals.items()],
        "",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = SwitchProofOptions()
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--gib", type=float, default=defaults.gib)
    args = parser.parse_args()
    main(SwitchProofOptions(rounds=args.rounds, gib=args.gib))
