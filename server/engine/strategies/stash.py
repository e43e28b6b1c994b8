"""``stash``: vLLM-Gaudi's in-process reconfigure (``MultiModelAsyncLLM.switch_model``).

One vLLM-Gaudi host engine serves every model: the engine core parks the old model runner in host memory and
restores or loads the target, skipping warm-up. Turnout drains and gates requests itself, so the host is asked to
switch with ``drain_timeout=0``.

Only verified against a fake (``tests/fakes/stash.py``) that follows vLLM-Gaudi's ``MultiModelAsyncLLM``
(``initialize``, ``switch_model`` and its result, ``current_model``, ``engine``, ``shutdown``): ``vllm_gaudi``
needs Gaudi. The API followed is vLLM-Gaudi's main branch at 091bbadd (2026-08-21):
``vllm_gaudi/v1/engine/multi_model_async_llm.py`` (last changed in 9a11108e) and
``vllm_gaudi/v1/engine/core_patch.py``, whose ``gaudi_reconfigure_engine(vllm_config_bytes, quant_config_path)``
returns the device memory figures ``switch_model`` passes on (``memory_before_mb``, ``memory_after_unload_mb``,
``freed_memory_mb``, ``stash_memory_after_mb``, summed over the workers' ``get_hpu_used_memory_mb``), and
``tests/unit_tests/test_multi_model_engine_unit.py`` for the contract. The engine core has that utility only when
``VLLM_HPU_MULTI_MODEL_CONFIG`` is set (``server/engine/runtime/stash_config.py``).

The host is built over the models configured then (vLLM-Gaudi takes every model's engine args up front), as the
model slots name them (:class:`SlotAccess`). After a reload that adds a model or changes one's profile, bringing
such a model up restarts the host over the current models, since the running host has never heard of it.

Hardening against that code:
    * ``switch_model`` returns early when the name matches, and its failure path leaves the name as it was. So
      the host's ``current_model`` is checked after every switch, and after a failed switch the name proves
      nothing: bringing back the model it still names restarts the host instead of trusting the early return.
    * its reconfigure refuses to run without ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (it cloudpickles the
      ``VllmConfig``); ``server/engine/runtime/stash_serialization.py`` sets it for the host's life only.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from server.engine.types import (
    ActivationMetrics,
    BroughtUp,
    Capabilities,
    Parked,
    SlotAccess,
    SlotState,
    StashHost,
    StashHostFactory,
)
from server.profiles.schema import ModelProfile

__all__ = ["StashStrategy"]

logger = logging.getLogger("turnout.engine")


class StashStrategy:
    """Delegates parking and activation to vLLM-Gaudi's reconfigure path."""

    name = "stash"
    capabilities: ClassVar[Capabilities] = Capabilities(holds_left_model=True)

    def __init__(self, host_factory: StashHostFactory) -> None:
        self._host_factory = host_factory
        self._host: StashHost | None = None
        self._host_models: dict[str, ModelProfile] = {}
        # The last switch failed: the host's engine may hold anything, whatever current_model says.
        self._uncertain = False

    async def park(self, name: str, engine: Any) -> Parked:
        # The runner is parked by the host when the next model activates; the shared engine object must not
        # stay reachable from the parked slot.
        return Parked(SlotState.STASHED)

    async def bring_up(self, name: str, profile: ModelProfile, held: Any, slots: SlotAccess) -> BroughtUp:
        if self._host is not None and self._uncertain and self._host.current_model == name:
            # vLLM-Gaudi would return early on the matching name without checking its engine: restart instead.
            await self.close()
        if self._host is not None and self._host_models.get(name) != profile:
            logger.info("stash: the host was built before %s was configured as it is now; restarting it", name)
            await self.close()
        if self._host is None:
            self._host_models = {**slots.models, name: profile}
            self._host = await self._host_factory(name, self._host_models)
            self._expect(name)
            return BroughtUp(self._host.engine, ActivationMetrics(method="restart"))
        try:
            metrics = await self._host.switch_model(name, drain_timeout=0) or {}
        except Exception:
            self._uncertain = True
            raise
        self._expect(name)
        return BroughtUp(
            self._host.engine,
            ActivationMetrics(
                reconfigure_ms=_ms(metrics.get("reconfigure_s")),
                stash_memory_after_mb=_number(metrics.get("stash_memory_after_mb")),
                memory_before_mb=_number(metrics.get("memory_before_mb")),
                memory_after_unload_mb=_number(metrics.get("memory_after_unload_mb")),
                freed_memory_mb=_number(metrics.get("freed_memory_mb")),
                method="reconfigure",
            ),
            path="restore",
        )

    def _expect(self, name: str) -> None:
        """Trust the host's own ``current_model``, never the call alone."""
        assert self._host is not None
        if self._host.current_model != name:
            self._uncertain = True
            raise RuntimeError(f"vLLM-Gaudi's host reports {self._host.current_model!r} active, not {name!r}")
        self._uncertain = False

    async def unload(self, name: str, engine: Any) -> None:
        pass  # the engine is the shared host's: it goes only with the host (close)

    async def close(self) -> None:
        """Shut the shared host down (manager shutdown)."""
        host, self._host = self._host, None
        self._uncertain = False
        if host is not None:
            host.shutdown()


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _ms(seconds: object) -> float | None:
    value = _number(seconds)
    return None if value is None else value * 1000.0
