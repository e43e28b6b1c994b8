"""Every engine's ``vllm:*`` collectors stay exported after vLLM unregisters them for the next engine."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from server.engine.engine_metrics import EngineMetrics


def _start_engine(registry: CollectorRegistry, model: str) -> tuple[Gauge, Counter]:
    """What vLLM's PrometheusStatLogger does: unregister every vllm:* collector, then register its own."""
    for collector in list(registry._collector_to_names):
        if any(name.startswith("vllm:") for name in registry._collector_to_names[collector]):
            registry.unregister(collector)
    running = Gauge("vllm:num_requests_running", "running", ["model_name", "engine"], registry=registry)
    tokens = Counter("vllm:prompt_tokens", "prompt tokens", ["model_name", "engine"], registry=registry)
    running.labels(model, "0").set(1)
    tokens.labels(model, "0").inc(7)
    return running, tokens


def _series(metrics: EngineMetrics) -> dict[str, set[str]]:
    return {f.name: {s.labels["model_name"] for s in f.samples} for f in metrics.collect()}


def test_two_resident_engines_both_export_every_series_under_their_model_name() -> None:
    registry = CollectorRegistry()
    Gauge("other_metric", "not vLLM's", registry=registry).set(1)
    metrics = EngineMetrics(registry)
    a, b = object(), object()
    _start_engine(registry, "a")
    assert metrics.capture(a) == 2
    _start_engine(registry, "b")  # unregisters a's collectors, as vLLM does
    assert metrics.capture(b) == 2
    assert _series(metrics) == {"vllm:num_requests_running": {"a", "b"}, "vllm:prompt_tokens": {"a", "b"}}
    families = {f.name: f for f in metrics.collect()}
    assert families["vllm:prompt_tokens"].type == "counter"
    assert "other_metric" not in families
    metrics.forget(a)
    assert _series(metrics) == {"vllm:num_requests_running": {"b"}, "vllm:prompt_tokens": {"b"}}


def test_an_engine_without_stats_captures_nothing_of_the_others() -> None:
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry)
    a, quiet = object(), object()
    _start_engine(registry, "a")
    metrics.capture(a)
    assert metrics.capture(quiet) == 0  # it registered nothing; a's collectors are still a's
    metrics.forget(a)
    # a is unloaded, but vLLM left its collectors registered: they are exported until the next engine's logger
    # replaces them, as they would be without Turnout.
    assert _series(metrics) == {"vllm:num_requests_running": {"a"}, "vllm:prompt_tokens": {"a"}}


def test_collectors_nobody_captured_are_exported_too() -> None:
    registry = CollectorRegistry()
    _start_engine(registry, "host")  # an engine the loader did not start (vLLM-Gaudi's stash host)
    assert _series(EngineMetrics(registry)) == {"vllm:num_requests_running": {"host"}, "vllm:prompt_tokens": {"host"}}


def _serve(registry: CollectorRegistry, *, prompt: int, hits: int, external: int, prefills: list[float]) -> None:
    """vLLM's counters after ``len(prefills)`` requests: ``prompt`` tokens, ``hits`` of them found in the engine's
    own prefix cache and ``external`` in a connector's, each request's prefill taking its seconds."""
    labels = ["model_name", "engine"]
    Counter("vllm:prompt_tokens", "prompt", labels, registry=registry).labels("m", "0").inc(prompt)
    Counter("vllm:prefix_cache_hits", "hits", labels, registry=registry).labels("m", "0").inc(hits)
    Counter("vllm:external_prefix_cache_hits", "external", labels, registry=registry).labels("m", "0").inc(external)
    prefill = Histogram("vllm:request_prefill_time_seconds", "prefill", labels, registry=registry).labels("m", "0")
    for seconds in prefills:
        prefill.observe(seconds)


def test_saved_prefill_is_a_requests_hit_tokens_at_the_engines_own_prefill_speed() -> None:
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry)
    engine = object()
    # 4 requests of 100 tokens: 240 found in its cache (60 a request), 40 in the pool's, 120 computed in 1.2 s.
    _serve(registry, prompt=400, hits=240, external=40, prefills=[0.3, 0.3, 0.3, 0.3])
    metrics.capture(engine)
    assert metrics.saved_prefill_s(engine) == pytest.approx(60 * 1.2 / 120)
    assert metrics.saved_prefill_s(object()) == 0.0  # not captured: nothing known
    metrics.forget(engine)
    assert metrics.saved_prefill_s(engine) == 0.0


def test_an_engine_without_a_prefix_hit_saves_nothing() -> None:
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry)
    engine = object()
    _serve(registry, prompt=400, hits=0, external=0, prefills=[0.3, 0.3])
    metrics.capture(engine)
    assert metrics.saved_prefill_s(engine) == 0.0
