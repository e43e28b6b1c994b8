"""Prometheus metrics on ``/metrics``: the manager's state, its events, and vLLM's own engine metrics.

State (slot states, in-flight requests, queue depths, the last switch) is read from the manager's snapshot at
scrape time, so nothing has to be kept in sync. Events (switch attempts, queue waits, aborted requests) come from
the manager as an observer and feed histograms and counters. vLLM registers its engine metrics (``vllm:*``) in
prometheus_client's process-wide registry; the app's registry forwards that one, so one scrape gets both. The
single-series aggregates the Kubernetes inference gateway reads (``turnout:*``) are in :mod:`gateway_metrics`.
The kept-KV pool's bytes per model are read from the pool (files on tmpfs) at scrape time. HTTP requests are
counted and timed by Litestar's Prometheus middleware (:data:`HTTP_METRICS`), by route template and status, in the
process-wide registry, so they are forwarded too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from litestar import Request
from litestar.enums import ScopeType
from litestar.plugins.prometheus import PrometheusConfig, PrometheusMiddleware
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.api.gateway_metrics import GatewayCollector
from server.engine import (
    ENGINE_METRICS,
    VLLM_PREFIX,
    EngineManager,
    EngineMetrics,
    ManagerSnapshot,
    SlotState,
    SwitchAttempt,
    Verification,
    kept_bytes_by_model,
)

__all__ = [
    "HTTP_METRICS",
    "KeptKVCollector",
    "ManagerCollector",
    "ManagerMetrics",
    "ProcessRegistryCollector",
    "metrics_registry",
]

#: Switches take milliseconds (keep) to minutes (stop on a large model).
SWITCH_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
#: Queue waits are bounded by switching.max_wait_s (120 s by default).
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)


#: ``turnout_http_requests_total`` and ``turnout_http_request_duration_seconds`` (and ``_requests_in_progress``,
#: ``_requests_error_total``) by method, route template (``/admin/models/{name}/load``, never the raw path:
#: the label's values stay bounded) and status code; requests to no route are not counted, for the same reason.
class _HttpMetrics(PrometheusMiddleware):
    """Litestar's middleware, labelling from the scope: its own builds ``request.url``, which raises on a Host
    header such as ``[::1]:8000`` (a 500 before the edge checks could answer)."""

    def _get_default_labels(self, request: Request[Any, Any, Any]) -> dict[str, str | int | float]:
        scope = request.scope
        return {
            "method": request.method if scope["type"] == ScopeType.HTTP else scope["type"],
            "path": scope.get("path_template") or scope["path"],
            "status_code": 200,
            "app_name": self._config.app_name,
        }


HTTP_METRICS = PrometheusConfig(
    app_name="turnout",
    prefix="turnout_http",
    group_path=True,
    exclude_unhandled_paths=True,
    middleware_class=_HttpMetrics,
)


class ManagerCollector(Collector):
    """Slot states, in-flight and queued requests, and the last switch, per scrape."""

    def __init__(self, manager: EngineManager[Any]) -> None:
        self._manager = manager

    def collect(self) -> Iterator[Metric]:
        snapshot = self._manager.snapshot()
        state = GaugeMetricFamily(
            "turnout_model_state", "1 for the state each model's slot is in", labels=["model", "state"]
        )
        in_flight = GaugeMetricFamily("turnout_in_flight_requests", "Admitted requests per model", labels=["model"])
        queued = GaugeMetricFamily(
            "turnout_queue_depth", "Auto mode: requests waiting for each model", labels=["model"]
        )
        for slot in snapshot.slots:
            for candidate in SlotState:
                state.add_metric([slot.name, candidate.value], 1.0 if slot.state == candidate.value else 0.0)
            in_flight.add_metric([slot.name], float(slot.in_flight))
            queued.add_metric([slot.name], float(slot.queued))
        yield state
        yield in_flight
        yield queued
        yield GaugeMetricFamily(
            "turnout_switch_in_progress", "1 while a switch runs", value=float(bool(snapshot.switching_to))
        )
        yield from _memory_families(snapshot)
        last = snapshot.last_switch
        if last is not None:
            yield GaugeMetricFamily(
                "turnout_last_switch_duration_seconds",
                "Duration of the last switch",
                value=last.duration_ms / 1000,
            )
            yield GaugeMetricFamily(
                "turnout_last_switch_drain_seconds",
                "Drain time of the last switch",
                value=last.drain_ms / 1000,
            )
            yield GaugeMetricFamily(
                "turnout_last_switch_aborted_requests",
                "Requests aborted by the last switch",
                value=float(last.aborted_requests),
            )


def _memory_families(snapshot: ManagerSnapshot) -> Iterator[Metric]:
    """The memory budget, each model's footprint and what the models holding engines take (``keep`` only)."""
    plan = snapshot.memory
    if plan is None or plan.budget_bytes is None:
        return
    yield GaugeMetricFamily(
        "turnout_memory_budget_bytes", "Memory resident models may take together", value=float(plan.budget_bytes)
    )
    footprints = plan.footprints()
    family = GaugeMetricFamily(
        "turnout_model_footprint_bytes",
        "What each model takes when resident (weights, KV cache, engine)",
        labels=["model"],
    )
    for name, size in footprints.items():
        family.add_metric([name], float(size))
    yield family
    yield GaugeMetricFamily(
        "turnout_memory_resident_bytes",
        "Footprints of the models holding an engine now",
        value=float(snapshot.memory_held_bytes or 0),
    )


class KeptKVCollector(Collector):
    """``turnout_kv_kept_bytes{model}``: what the kept-KV pool holds per model (the pool's cached figures);
    nothing while there is no pool (``switching.kv_keep_bytes`` unset, or no engine has kept anything yet).

    Args:
        manager: Names the models.
        usage: Bytes kept per served model name (default: this server's pool, read at most every few seconds).
    """

    def __init__(
        self,
        manager: EngineManager[Any],
        usage: Callable[[Iterable[str]], dict[str, int]] = kept_bytes_by_model,
    ) -> None:
        self._manager = manager
        self._usage = usage

    def describe(self) -> Iterator[Metric]:
        # The registry asks at registration: the family's name, without reading the pool.
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        usage = self._usage([slot.name for slot in self._manager.snapshot().slots])
        if not usage:
            return
        kept = self._family()
        for model, size in usage.items():
            kept.add_metric([model], float(size))
        yield kept

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "turnout_kv_kept_bytes",
            "Bytes of prefix-cache blocks the kept-KV pool (switching.kv_keep_bytes) holds for each model; the "
            "blocks restored from it are counted by vLLM as vllm:external_prefix_cache_hits (tokens)",
            labels=["model"],
        )


class ManagerMetrics:
    """The manager's events as histograms and counters (a :class:`server.engine.ManagerObserver`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.switch_duration = Histogram(
            "turnout_switch_duration_seconds",
            "Wall time of each switch attempt, drain included",
            ["from", "to", "strategy", "outcome"],
            buckets=SWITCH_BUCKETS,
            registry=registry,
        )
        self.switches = Counter("turnout_switches", "Switch attempts by outcome", ["outcome"], registry=registry)
        self.aborted = Counter(
            "turnout_aborted_requests",
            "Requests aborted because a switch's drain timeout ran out",
            ["model"],
            registry=registry,
        )
        self.queue_wait = Histogram(
            "turnout_queue_wait_seconds",
            "Auto mode: how long requests waited for their model, by model and outcome (admitted or refused)",
            ["model", "outcome"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.engine_deaths = Counter(
            "turnout_engine_deaths",
            "Engines that died or hung while serving or parked, by model and cause (died, hung)",
            ["model", "cause"],
            registry=registry,
        )
        self.engine_restarts = Counter(
            "turnout_engine_restarts",
            "Switches that brought a model back after its engine died, by model and outcome (ok, failed)",
            ["model", "outcome"],
            registry=registry,
        )
        self.verifications = Counter(
            "turnout_switch_verifications",
            "Proofs of a switched model before it was published, by model, path (in_place, fork, wake, restore, "
            "plain) and outcome (passed, changed, fell_back, failed, skipped)",
            ["model", "path", "outcome"],
            registry=registry,
        )
        self.idle_unloads = Counter(
            "turnout_idle_unloads",
            "Models unloaded because they served nothing for their idle_unload_s",
            ["model"],
            registry=registry,
        )

    def switch_attempted(self, attempt: SwitchAttempt) -> None:
        labels = (attempt.source or "none", attempt.target, attempt.strategy, attempt.outcome)
        self.switch_duration.labels(*labels).observe(attempt.duration_ms / 1000)
        self.switches.labels(attempt.outcome).inc()

    def request_waited(self, model: str, seconds: float, *, admitted: bool) -> None:
        self.queue_wait.labels(model, "admitted" if admitted else "refused").observe(seconds)

    def request_aborted(self, model: str) -> None:
        self.aborted.labels(model).inc()

    def model_idle_unloaded(self, model: str) -> None:
        self.idle_unloads.labels(model).inc()

    def engine_died(self, model: str, cause: str) -> None:
        # One word keeps the label's values few: the full cause is in the slot's reason and the log.
        self.engine_deaths.labels(model, "hung" if cause.startswith("engine hung") else "died").inc()

    def engine_restarted(self, model: str, *, ok: bool) -> None:
        self.engine_restarts.labels(model, "ok" if ok else "failed").inc()

    def model_verified(self, model: str, verification: Verification) -> None:
        self.verifications.labels(model, verification.path, verification.outcome).inc()


class ProcessRegistryCollector(Collector):
    """Forwards prometheus_client's process-wide registry, where vLLM's engines register ``vllm:*`` metrics.

    The ``vllm:*`` families come from :data:`ENGINE_METRICS` instead, which holds every resident engine's (vLLM
    leaves only the last-loaded engine's in the registry).
    """

    def __init__(self, source: CollectorRegistry = REGISTRY, engines: EngineMetrics = ENGINE_METRICS) -> None:
        self._source = source
        self._engines = engines

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            if not family.name.startswith(VLLM_PREFIX):
                yield family
        yield from self._engines.collect()


def metrics_registry(manager: EngineManager[Any]) -> CollectorRegistry:
    """A registry of the app's own (so apps and tests never collide), with vLLM's metrics forwarded into it."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ManagerCollector(manager))
    registry.register(KeptKVCollector(manager))
    manager.add_observer(ManagerMetrics(registry))
    registry.register(ProcessRegistryCollector())
    registry.register(GatewayCollector(manager))
    return registry
