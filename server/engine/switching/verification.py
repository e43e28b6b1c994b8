"""A switch proves the model it publishes: the fixed probe through the model's own bundle, compared with its
fingerprint, before the switch closes (so requests wait through it, and none is answered by an unproven engine).
The same proof runs wherever a model comes up: a load or preload proves the engine before the model is resident
(``ModelSlots.load``), and a switch's rollback proves the old model it brings back before republishing it.

What is proven (``switching.verify``): ``fast_paths`` (the default) proves every model a fast path changed (an
in-place swap, an engine core forked from the warm launcher, a wake, a stash restore) and records a fingerprint on
a plain start that has none; ``always`` proves plain starts too; ``off`` proves nothing. A model already serving (a
resident one) was proven when it came up, so activating it proves nothing again.

On a mismatch the model is not published: the engine is freed and the strategy starts it the plain way (engine
cores spawned, no kept KV blocks), and that engine is probed:

* it agrees with the fast path: the checkpoint changed; its reading is recorded and it is published (``changed``);
  kept blocks of the old weights are never restored, as their identity is the content's (``kv_pool.py``);
* it agrees with the fingerprint (or the checkpoint changed and the fast path alone was wrong): the plain engine is
  published, and the model stays on the plain path until the profile is reloaded or the server restarts
  (``fell_back``);
* neither: the switch fails and rolls back as a failed load does (``failed``); a load fails (``LoadFailed``: the
  model is marked failed, not resident), and a rollback's restore fails (no model is published).

The plain start goes through the strategy's ``bring_up`` in every case, a load's too: with the loaded engine freed
first, there is room for it as there was for the load.

The sleep and stash strategies' wake and restore are proven against fakes only (vLLM refuses sleep mode on CPU).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec

from server.engine.runtime import (
    Fingerprint,
    FingerprintStore,
    content_digests,
    fingerprint_key,
    model_dtype,
    spawned_starts,
)
from server.engine.switching.model_slots import ModelSlots
from server.engine.switching.probe_agreement import agreement
from server.engine.types import (
    FIRST_FINGERPRINT,
    ModelProbe,
    ProbeReading,
    ProofOutcome,
    ProofPath,
    Published,
    Verification,
)
from server.profiles.schema import ModelProfile
from server.vllm_plugin import ContentDigests

__all__ = ["ModelProof", "ProofFailed"]

logger = logging.getLogger("turnout.engine")

B = TypeVar("B")

#: The paths ``fast_paths`` proves.
_FAST: frozenset[str] = frozenset({"in_place", "fork", "wake", "restore"})


class ProofFailed(RuntimeError):
    """Neither the fast path nor a plain start agreed with the fingerprint: the switch rolls back."""


class ModelProof(Generic[B]):
    """Proves each model a switch brings up before it is published (see the module's docstring).

    Args:
        probe: Runs the fixed probe through a published bundle (the frontend's, wired in by the CLI).
        store: The fingerprints on record.
        plain_starts: ``switching.verify: always``: plain starts are compared too (else only recorded when new).
        vllm_version: vLLM's version, part of every fingerprint's key.
        observe: Told of every verdict (``(model, verification)``: the metrics and the status).
    """

    def __init__(
        self,
        probe: ModelProbe,
        store: FingerprintStore,
        *,
        plain_starts: bool,
        vllm_version: str,
        observe: Callable[[str, Verification], None] | None = None,
    ) -> None:
        self._probe = probe
        self._store = store
        self._plain_starts = plain_starts
        self._vllm_version = vllm_version
        self._observe = observe
        self._plain_only: set[str] = set()
        # Read from the state folder once: a proof then pays a stat of each checkpoint file, no cache file parse.
        self._digests: ContentDigests | None = None

    @property
    def plain_only(self) -> frozenset[str]:
        """The models kept on the plain path since a fast path answered wrong."""
        return frozenset(self._plain_only)

    def forget_fallbacks(self) -> None:
        """A reload: every model may take its fast paths again."""
        self._plain_only.clear()

    async def prove(
        self, slots: ModelSlots[B], name: str, path: ProofPath | None, published: Published[B]
    ) -> tuple[Published[B], Verification | None]:
        """Prove the loading ``name``, brought up by ``path`` and built into ``published``; returns what to
        publish (the plain engine's snapshot after a fallback) and the verdict (None: nothing was proven).

        Raises:
            ProofFailed: Neither agreed; the switch rolls back (the caller marks ``name`` failed).
        """
        if path is None:
            return published, None
        started = time.perf_counter()
        profile = slots.models[name]
        if name in self._plain_only and path != "plain":
            published, _ = await self._plain_start(slots, name, profile)
            return published, self._verdict(name, "fell_back", path, started, "kept on the plain path")
        keyed = asyncio.ensure_future(asyncio.to_thread(self._key, profile))
        recorded = self._store.load(name)
        if path not in _FAST and not self._plain_starts and recorded is not None and recorded.key == await keyed:
            return published, None
        # The key (a stat of each checkpoint file, in a thread) is taken while the probe runs.
        reading = await self._probe(name, profile, published.bundle)
        key = await keyed
        if reading.skipped is not None:
            return published, self._verdict(name, "skipped", path, started, reading.skipped)
        dtype = model_dtype(profile)
        if recorded is None:
            self._record(name, key, dtype, reading)
            return published, self._verdict(name, "passed", path, started, FIRST_FINGERPRINT)
        check = agreement(recorded, reading, dtype)
        if check.agrees:
            if recorded.key != key:
                self._record(name, key, dtype, reading)
            return published, self._verdict(name, "passed", path, started, check.detail)
        if path == "plain":  # the reference itself answers otherwise: what it runs changed
            self._record(name, key, dtype, reading)
            return published, self._mismatch(name, "changed", path, started, check.detail)
        logger.warning("%s: the probe after the %s disagrees (%s); starting it the plain way", name, path, check.detail)
        try:
            published, plain = await self._plain_start(slots, name, profile)
        except Exception as exc:
            self._mismatch(name, "failed", path, started, f"{check.detail}; the plain start failed: {exc}")
            raise ProofFailed(f"the plain start after a failed proof failed: {exc}") from exc
        if plain.skipped is None and agreement(plain, reading, dtype).agrees:
            self._record(name, key, dtype, plain)
            return published, self._mismatch(name, "changed", path, started, f"the plain start agrees: {check.detail}")
        if plain.skipped is None and (recorded.key != key or agreement(recorded, plain, dtype).agrees):
            self._record(name, key, dtype, plain)
            self._plain_only.add(name)
            return published, self._mismatch(name, "fell_back", path, started, f"the {path} was wrong: {check.detail}")
        self._mismatch(name, "failed", path, started, f"neither the {path} nor a plain start agrees: {check.detail}")
        raise ProofFailed(f"neither the {path} nor a plain start answers as the model's fingerprint")

    def _key(self, profile: ModelProfile) -> str:
        if self._digests is None:
            self._digests = content_digests()
        return fingerprint_key(profile, self._digests, self._vllm_version)

    async def _plain_start(
        self, slots: ModelSlots[B], name: str, profile: ModelProfile
    ) -> tuple[Published[B], ProbeReading]:
        """Start ``name`` the plain way and probe it: engine cores spawned, and no kept KV blocks to restore."""
        args = {key: value for key, value in profile.engine_args.items() if key != "kv_transfer_config"}
        with spawned_starts():
            brought = await slots.restart_plain(name, msgspec.structs.replace(profile, engine_args=args))
        if brought.path not in (None, "plain"):  # a strategy that made room by a fast path again proves nothing
            raise ProofFailed(f"no plain start of {name} could be made (it came up by {brought.path})")
        published = await slots.publish(name)
        return published, await self._probe(name, profile, published.bundle)

    def _record(self, name: str, key: str, dtype: str, reading: ProbeReading) -> None:
        fingerprint = Fingerprint(
            key=key,
            dtype=dtype,
            tokens=list(reading.tokens),
            top=[[(int(token), float(lp)) for token, lp in pairs] for pairs in reading.top],
            vector=None if reading.vector is None else [float(x) for x in reading.vector],
        )
        self._store.save(name, fingerprint)

    def _mismatch(self, name: str, outcome: ProofOutcome, path: str, started: float, detail: str) -> Verification:
        """A verdict after a mismatch: one warning line naming the model, the path and what was done."""
        verdict = self._verdict(name, outcome, path, started, detail)
        logger.warning("%s: proof after the %s: %s (%s)", name, path, outcome, detail)
        return verdict

    def _verdict(self, name: str, outcome: ProofOutcome, path: str, started: float, detail: str) -> Verification:
        duration = round((time.perf_counter() - started) * 1000.0, 1)
        verdict = Verification(outcome=outcome, duration_ms=duration, path=path, detail=detail)
        if self._observe is not None:
            self._observe(name, verdict)
        return verdict
