"""Prometheus metrics, read from the manager's snapshot at scrape time (nothing to keep in sync)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.engine import EngineManager, SlotState

__all__ = ["ManagerCollector", "metrics_registry"]


class ManagerCollector(Collector):
    """Slot states, in-flight requests and the last switch, per scrape."""

    def __init__(self, manager: EngineManager[Any]) -> None:
        self._manager = manager

    def collect(self) -> Iterator[Metric]:
        snapshot = self._manager.snapshot()
        state = GaugeMetricFamily(
            "turnout_model_state", "1 for the state each model's slot is in", labels=["model", "state"]
        )
        in_flight = GaugeMetricFamily("turnout_in_flight_requests", "Admitted requests per model", labels=["model"])
        for slot in snapshot.slots:
            for candidate in SlotState:
                state.add_metric([slot.name, candidate.value], 1.0 if slot.state == candidate.value else 0.0)
            in_flight.add_metric([slot.name], float(slot.in_flight))
        yield state
        yield in_flight
        yield GaugeMetricFamily(
            "turnout_switch_in_progress", "1 while a switch runs", value=float(bool(snapshot.switching_to))
        )
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


def metrics_registry(manager: EngineManager[Any]) -> CollectorRegistry:
    """A registry of the app's own (not the process-global one, so apps and tests never collide)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ManagerCollector(manager))
    return registry
