"""The Kubernetes inference gateway's contract: the endpoint picker, configured as ``docs/deploy.md`` says, reads
Turnout's ``/metrics`` into the attributes its scorers use (fake engines, ``vllm:*`` stand-ins for two engines).

Each state's attributes and LoRA-affinity scores must match ``golden/gateway/STATE.json``. To regenerate after a
deliberate change, run with ``TURNOUT_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, Gauge
from ruamel.yaml import YAML

from server.api.gateway_metrics import GATEWAY_METRIC_NAMES
from server.engine.strategies import KeepStrategy, StopStrategy
from server.profiles.schema import Switching
from tests.api import gateway_picker
from tests.api.conftest import MakeClient, admin
from tests.api.gateway_picker import EndpointMetrics, EngineConfig, extract, lora_affinity, parse_families
from tests.fakes.engines import FakeLoader, fake_models

GOLDEN = Path(__file__).parent / "golden" / "gateway"
DEPLOY_DOC = Path(__file__).parents[2] / "docs" / "deploy.md"
UPDATE = os.environ.get("TURNOUT_UPDATE_GOLDEN") == "1"
MODELS = ("tools", "plain", "extra")


def _doc_blocks() -> list[Any]:
    """Every YAML block of the deploy page, parsed."""
    blocks = re.findall(r"```yaml\n(.*?)```", DEPLOY_DOC.read_text(), flags=re.DOTALL)
    return [YAML(typ="safe").load(block) for block in blocks]


def _doc_picker() -> tuple[dict[str, str], list[EngineConfig]]:
    """The Turnout pod's labels and the picker's engine configurations, as the deploy page gives them."""
    blocks = _doc_blocks()
    deployment = next(block for block in blocks if isinstance(block, dict) and block.get("kind") == "Deployment")
    picker = next(block for block in blocks if isinstance(block, dict) and block.get("kind") == "EndpointPickerConfig")
    extractor = next(p for p in picker["plugins"] if p["type"] == "core-metrics-extractor")
    assert extractor["parameters"]["engineLabelKey"] == gateway_picker.ENGINE_LABEL
    configs = [EngineConfig.from_params(c) for c in extractor["parameters"]["engineConfigs"]]
    return dict(deployment["spec"]["template"]["metadata"]["labels"]), configs


def _attributes(metrics: EndpointMetrics) -> dict[str, Any]:
    return {
        "WaitingQueueSize": metrics.WaitingQueueSize,
        "RunningRequestsSize": metrics.RunningRequestsSize,
        "KVCacheUsagePercent": metrics.KVCacheUsagePercent,
        "ActiveModels": list(metrics.ActiveModels),
        "WaitingModels": list(metrics.WaitingModels),
        "MaxActiveModels": metrics.MaxActiveModels,
        "errors": metrics.errors,
        "lora_affinity": {model: lora_affinity(metrics, model) for model in MODELS},
    }


def _check_golden(state: str, page: str) -> dict[str, Any]:
    labels, configs = _doc_picker()
    got = _attributes(extract(page, labels, configs))
    golden = GOLDEN / f"{state}.json"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(got, indent=2) + "\n")
    assert golden.exists(), f"no golden file for {state}; run with TURNOUT_UPDATE_GOLDEN=1 and review it"
    assert got == json.loads(golden.read_text())
    return got


def _single_series(page: str) -> None:
    """Each contract family has exactly one series, typed gauge; the info series' value is a recent timestamp."""
    families = parse_families(page)
    for name in GATEWAY_METRIC_NAMES:
        assert families[name].type == "gauge" and len(families[name].samples) == 1, name
    assert abs(families["turnout:lora_requests_info"].samples[0].value - time.time()) < 60


@pytest.fixture
def two_engines() -> Iterator[dict[str, Gauge]]:
    """Stand-ins for two resident vLLM engines' gauges in the process registry, where vLLM registers them."""
    gauges = {
        name: Gauge(name, "vLLM stand-in", ["model_name"], registry=REGISTRY)
        for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")
    }
    try:
        yield gauges
    finally:
        for gauge in gauges.values():
            REGISTRY.unregister(gauge)


async def test_one_active_model(make_client: MakeClient) -> None:
    client, manager = await make_client(strategy=StopStrategy)
    lease = await manager.acquire("tools")
    try:
        page = (await client.get("/metrics")).text
    finally:
        manager.release(lease)
    _single_series(page)
    got = _check_golden("one_active", page)
    assert got["ActiveModels"] == ["tools"] and got["RunningRequestsSize"] == 1 and got["MaxActiveModels"] == 1


async def test_two_resident_models_and_a_queue(make_client: MakeClient, two_engines: dict[str, Gauge]) -> None:
    switching = Switching(mode="auto", max_active=2, min_residency_s=60, max_residency_s=60)
    client, manager = await make_client(
        models=fake_models(*MODELS),
        strategy=lambda loader: KeepStrategy(loader, max_resident=2),
        switching=switching,
        admission_timeout=30.0,
    )
    assert (await client.post("/admin/models/plain/load", headers=admin())).status_code == 200
    leases = [await manager.acquire("tools") for _ in range(3)]  # the active model serves: it keeps the device
    body = {"model": "extra", "messages": [], "max_tokens": 1}
    waiting = [asyncio.create_task(client.post("/v1/chat/completions", json=body)) for _ in range(2)]
    try:
        for _ in range(500):
            if manager.snapshot().slots[2].queued == 2:
                break
            await asyncio.sleep(0.01)
        assert manager.snapshot().slots[2].queued == 2, "both requests for extra wait behind the active model"
        # The two engines' own view: one of the three in-flight requests waits for a batch slot in tools'.
        for name, values in (
            ("vllm:num_requests_waiting", (1, 0)),
            ("vllm:num_requests_running", (2, 0)),
            ("vllm:kv_cache_usage_perc", (0.25, 0.5)),
        ):
            for model, value in zip(("tools", "plain"), values, strict=True):
                two_engines[name].labels(model).set(value)
        page = (await client.get("/metrics")).text
    finally:
        for task in waiting:
            task.cancel()
        for lease in leases:
            manager.release(lease)
    _single_series(page)
    got = _check_golden("two_resident_queue", page)
    # Waiting: two queued for extra plus one inside tools' engine; running: three in flight less that one.
    assert (got["WaitingQueueSize"], got["RunningRequestsSize"], got["KVCacheUsagePercent"]) == (3, 2, 0.5)
    assert got["ActiveModels"] == ["tools", "plain"] and got["WaitingModels"] == ["extra"]
    assert got["lora_affinity"] == {"tools": 1.0, "plain": 1.0, "extra": 0.6}
    # Why Turnout's own names: an unlabelled pod gets the vllm mapping, which reads only the first engine's series.
    unlabelled = extract(page, {}, _doc_picker()[1])
    assert unlabelled.KVCacheUsagePercent == 0.25 and unlabelled.WaitingQueueSize == 1


async def test_nothing_active(make_client: MakeClient) -> None:
    client, _ = await make_client(loader=FakeLoader())
    forced = await client.post("/admin/models/tools/unload", json={"force": True}, headers=admin())
    assert forced.status_code == 200
    page = (await client.get("/metrics")).text
    _single_series(page)
    got = _check_golden("nothing_active", page)
    assert got["ActiveModels"] == [] and got["MaxActiveModels"] == 2
    assert got["lora_affinity"] == {"tools": 0.8, "plain": 0.8, "extra": 0.8}


def test_the_picker_port_takes_the_first_series_and_the_newest_lora_info() -> None:
    page = "\n".join(
        [
            "# TYPE q gauge",
            'q{m="a"} 3',
            'q{m="b"} 5',
            "# TYPE info gauge",
            'info{running_lora_adapters="old",max_lora="1"} 10',
            'info{running_lora_adapters=" x, ,y ",waiting_lora_adapters="z",max_lora="4"} 20',
            "# TYPE u untyped",
            "u 7",
        ]
    )
    config = EngineConfig.from_params(
        {"name": "t", "queuedRequestsSpec": "q", "runningRequestsSpec": "q{m=b}", "kvUsageSpec": "u"}
        | {"loraSpec": "info"}
    )
    got = extract(page, {gateway_picker.ENGINE_LABEL: "t"}, [config])
    assert (got.WaitingQueueSize, got.RunningRequestsSize, got.KVCacheUsagePercent) == (3, 5, 0.0)
    assert list(got.ActiveModels) == ["x", "y"] and list(got.WaitingModels) == ["z"] and got.MaxActiveModels == 4
    with pytest.raises(ValueError, match="appears again"):
        parse_families("# TYPE q gauge\nq 1\n# TYPE r gauge\nr 1\nq 2\n")
