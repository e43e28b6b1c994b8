"""The Kubernetes inference gateway's metrics contract: one series per metric the endpoint picker reads.

The llm-d router's endpoint picker (and the Gateway API inference extension it grew from) scrapes each pod's
``/metrics`` and, for an ordinary metric without timestamps, takes the *first* series of the family it is told to
read. Turnout exports the ``vllm:*`` families with one series per resident engine, so the picker would see only
whichever engine comes first. These families carry Turnout's own names and exactly one series each, aggregated over
the whole pod, and the picker's engine configuration for pods labelled ``llm-d.ai/engine-type: turnout`` names
them (``docs/deploy.md``):

* ``turnout:num_requests_waiting``: requests that wait, summed: Turnout's own queue (auto mode's requests waiting
  for their model, the scheduler's queue depth) plus those admitted but waiting inside an engine for a batch slot
  (vLLM's ``num_requests_waiting``). The two sets are disjoint: a queued request has no engine yet.
* ``turnout:num_requests_running``: Turnout's in-flight requests (admitted, holding a lease), less those the
  engines report waiting, so that no request counts twice. Summed over models, since every one of them loads the
  pod.
* ``turnout:kv_cache_usage_perc``: the *highest* KV-cache use of any resident engine (0 to 1). Each engine has a
  KV cache of its own, so a sum would exceed 1 and a mean would hide the full one; the fullest one is the one that
  preempts first, which is what the picker's KV-cache scorer avoids.
* ``turnout:lora_requests_info{running_lora_adapters,waiting_lora_adapters,max_lora}``: shaped as vLLM's
  ``vllm:lora_requests_info``, which the picker's LoRA-affinity scorer reads, with models in place of adapters:
  ``running_lora_adapters`` lists the active model, then the resident (parked) ones; ``waiting_lora_adapters`` the
  models with queued requests; ``max_lora`` how many models the pod holds at once without an engine start. As in
  vLLM, the value is a wall-clock timestamp (the picker takes the series with the highest); with one series it is
  the scrape's time.

Every value is read at scrape time from the manager's snapshot and the engines' own metrics, so nothing has to be
kept in sync.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.engine import (
    ENGINE_METRICS,
    PARKED,
    EngineManager,
    EngineMetrics,
    ManagerSnapshot,
    SlotState,
)

__all__ = ["GATEWAY_METRIC_NAMES", "GatewayCollector"]

WAITING = "turnout:num_requests_waiting"
RUNNING = "turnout:num_requests_running"
KV_CACHE = "turnout:kv_cache_usage_perc"
LORA_INFO = "turnout:lora_requests_info"
#: The families of the contract, in the order of the picker's engine configuration.
GATEWAY_METRIC_NAMES = (WAITING, RUNNING, KV_CACHE, LORA_INFO)


class GatewayCollector(Collector):
    """The four single-series families of the gateway contract, per scrape.

    Args:
        manager: Whose snapshot gives the slots, their queues and in-flight requests.
        engines: The resident engines' ``vllm:*`` metrics (waiting requests and KV-cache use).
        clock: Wall-clock seconds, the value of the ``lora_requests_info`` series.
    """

    def __init__(
        self,
        manager: EngineManager[Any],
        engines: EngineMetrics = ENGINE_METRICS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._manager = manager
        self._engines = engines
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        snapshot = self._manager.snapshot()
        engine_values = _engine_samples(self._engines.collect())
        engine_waiting = sum(engine_values.get("vllm:num_requests_waiting", []))
        queued = sum(slot.queued for slot in snapshot.slots)
        yield GaugeMetricFamily(
            WAITING,
            "Requests waiting in this pod: Turnout's queue for a model plus the engines' own waiting requests",
            value=float(queued + engine_waiting),
        )
        yield GaugeMetricFamily(
            RUNNING,
            "Requests running in this pod: in-flight requests less those waiting inside an engine",
            value=float(max(snapshot.in_flight - engine_waiting, 0)),
        )
        yield GaugeMetricFamily(
            KV_CACHE,
            "KV-cache use of the fullest resident engine (1 means 100 percent)",
            value=max(engine_values.get("vllm:kv_cache_usage_perc", []), default=0.0),
        )
        info = GaugeMetricFamily(
            LORA_INFO,
            "Models of this pod as the gateway's LoRA-affinity scorer reads them; the value is the scrape's time",
            labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
        )
        running, waiting = _model_lists(snapshot)
        info.add_metric([str(self._manager.models_held_at_once), ",".join(waiting), ",".join(running)], self._clock())
        yield info


def _engine_samples(families: Iterable[Metric]) -> dict[str, list[float]]:
    """Every engine's sample values by metric name (one sample per engine for the gauges read here)."""
    values: dict[str, list[float]] = {}
    for family in families:
        for sample in family.samples:
            values.setdefault(sample.name, []).append(sample.value)
    return values


def _model_lists(snapshot: ManagerSnapshot) -> tuple[list[str], list[str]]:
    """The loaded models (the active one first, then the parked ones in profile order) and the queued ones."""
    running = [slot.name for slot in snapshot.slots if slot.state == SlotState.ACTIVE]
    running += [slot.name for slot in snapshot.slots if SlotState(slot.state) in PARKED]
    waiting = [slot.name for slot in snapshot.slots if slot.queued > 0]
    return running, waiting
