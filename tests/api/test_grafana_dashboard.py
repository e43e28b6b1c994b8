"""``deploy/grafana/turnout.json`` queries only metrics that are exported: Turnout's (read from an app's
``/metrics``) and vLLM's (read from vLLM's metrics logger source)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from server.engine.residency.slot_eviction import budget_eviction
from server.engine.strategies import KeepStrategy
from server.profiles.vllm_source import vllm_package_dir
from tests.api.conftest import MakeClient, admin
from tests.fakes.memory_plans import GIB, budget_plan

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "turnout.json"
#: A metric name in a PromQL expression: Turnout's and vLLM's prefixes (label names and functions never have them).
_METRIC = re.compile(r"\b(?:turnout[_:]|vllm:)[A-Za-z0-9_:]*")
_SUFFIX = re.compile(r"_(?:bucket|count|sum|total|created)$")


def _family(name: str) -> str:
    """The family a series belongs to: ``x_bucket``, ``x_count``, ``x_sum`` and a counter's ``x_total`` are x's."""
    return _SUFFIX.sub("", name)


def _queried() -> set[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    assert len(exprs) >= 10
    return {_family(name) for expr in exprs for name in _METRIC.findall(expr)}


def _vllm_families() -> set[str]:
    root = vllm_package_dir()
    assert root is not None, "reads vLLM's metrics logger source"
    source = (root / "v1" / "metrics" / "loggers.py").read_text()
    return {_family(name) for name in re.findall(r'"(vllm:[a-z_]+)"', source)}


async def test_every_metric_the_dashboard_queries_is_exported(make_client: MakeClient) -> None:
    plan = budget_plan({"tools": 3 * GIB, "plain": 2 * GIB}, 5 * GIB)
    client, _ = await make_client(
        strategy=lambda loader: KeepStrategy(loader, by_bytes=budget_eviction(lambda: plan)), memory_plan=plan
    )
    assert (await client.post("/v1/models/switch", json={"model": "plain"}, headers=admin())).status_code == 200
    text = (await client.get("/metrics")).text
    exported = {
        _family(name)
        for family in text_string_to_metric_families(text)
        for name in [family.name, *(sample.name for sample in family.samples)]
    }
    queried = _queried()
    # The dashboard covers each model's state, switches and their time, queue wait, TTFT, tokens and memory.
    for needed in ("turnout_model_state", "turnout_switch_duration_seconds", "turnout_queue_wait_seconds"):
        assert needed in queried
    assert {"vllm:time_to_first_token_seconds", "vllm:generation_tokens", "turnout_memory_resident_bytes"} <= queried
    missing = queried - exported - _vllm_families()
    assert not missing, f"the dashboard queries metrics nobody exports: {sorted(missing)}"
