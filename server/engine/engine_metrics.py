"""Every resident engine's ``vllm:*`` metrics, not only the last-loaded one's.

vLLM's ``PrometheusStatLogger`` registers its collectors in prometheus_client's process-wide registry, and
unregisters every ``vllm:*`` collector there first (``unregister_vllm_metrics``): with two engines resident
(``keep``), only the last-loaded engine's series would be exported, though the earlier engine's logger keeps
updating its own, now unregistered, collectors. So the loader :meth:`captures <EngineMetrics.capture>` the
collectors an engine registered right after it starts, and :meth:`EngineMetrics.collect` merges every live
engine's families, labelled by vLLM's own ``model_name``, into one family per metric name. The same captured
collectors tell residency what an engine's warm prefix cache saves (:meth:`EngineMetrics.saved_prefill_s`).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["ENGINE_METRICS", "VLLM_PREFIX", "EngineMetrics"]

VLLM_PREFIX = "vllm:"


class EngineMetrics:
    """vLLM's collectors of each running engine, merged at scrape time.

    Args:
        registry: Where vLLM registers its collectors (prometheus_client's process-wide registry).
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._registry = registry
        self._by_engine: dict[int, list[Collector]] = {}
        self._lock = threading.Lock()  # scrapes may run in another thread than the loads

    def capture(self, engine: Any) -> int:
        """Keep the ``vllm:*`` collectors registered now as ``engine``'s (call right after it started, before
        another engine starts). Returns how many were captured."""
        with self._lock:
            # An engine started without stats registers none: the registry then still holds an earlier engine's.
            known = {id(c) for group in self._by_engine.values() for c in group}
            collectors = [c for c in self._registered_vllm_collectors() if id(c) not in known]
            self._by_engine[id(engine)] = collectors
        return len(collectors)

    def forget(self, engine: Any) -> None:
        """``engine`` is unloaded: its series leave the scrape."""
        with self._lock:
            self._by_engine.pop(id(engine), None)

    def collect(self) -> Iterator[Metric]:
        """One family per ``vllm:*`` metric name, with every live engine's samples (and those of collectors
        registered by engines not captured, such as a host the loader does not start)."""
        with self._lock:
            collectors: dict[int, Collector] = {id(c): c for group in self._by_engine.values() for c in group}
        for collector in self._registered_vllm_collectors():
            collectors.setdefault(id(collector), collector)
        families: dict[str, Metric] = {}
        for collector in collectors.values():
            for family in collector.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                merged.samples.extend(family.samples)
        yield from families.values()

    def saved_prefill_s(self, engine: Any) -> float:
        """The prefill seconds ``engine``'s own prefix cache saves one request, on average, by vLLM's counters since it
        started: the prefix-cache hit tokens per request (``vllm:prefix_cache_hits`` over the count of
        ``vllm:request_prefill_time_seconds``) times the prefill seconds per token it did compute (that histogram's
        sum over ``vllm:prompt_tokens`` less the local and the external hits). What the first request after a reload
        pays again, at least, once the engine and its cache are gone. 0 for an engine not captured, without stats or
        without a hit yet. Under an in-place swap the engine's counters count every model it has served."""
        with self._lock:
            collectors = list(self._by_engine.get(id(engine), ()))
        totals: defaultdict[str, float] = defaultdict(float)
        for collector in collectors:
            for family in collector.collect():
                for sample in family.samples:
                    totals[sample.name] += sample.value
        hits = totals["vllm:prefix_cache_hits_total"]
        requests = totals["vllm:request_prefill_time_seconds_count"]
        prefill_s = totals["vllm:request_prefill_time_seconds_sum"]
        if hits <= 0 or requests <= 0 or prefill_s <= 0:
            return 0.0
        computed = totals["vllm:prompt_tokens_total"] - hits - totals["vllm:external_prefix_cache_hits_total"]
        return hits / requests * prefill_s / max(computed, 1.0)

    def _registered_vllm_collectors(self) -> list[Collector]:
        # prometheus_client keeps no public list of collectors; vLLM's own unregister_vllm_metrics reads the same.
        names = dict(self._registry._collector_to_names)
        return [c for c, metric_names in names.items() if any(n.startswith(VLLM_PREFIX) for n in metric_names)]


#: The process's engines' metrics (one registry per process, as vLLM's own).
ENGINE_METRICS = EngineMetrics()
