"""The request's ``model`` reaches vLLM's serving classes as the adapter's name, so vLLM picks its LoRA request."""

from __future__ import annotations

from typing import Any

from server.frontend.vllm_adapter._calls import parse_request


def _validate(data: Any) -> Any:
    return data


def test_an_adapter_name_stays_and_any_other_name_becomes_the_models() -> None:
    adapters = {"pirate": object()}
    kept = parse_request(_validate, {"model": "pirate", "x": 1}, model_name="base", adapters=adapters)
    assert kept == {"model": "pirate", "x": 1}
    for asked in ("alias", None, 3):
        renamed = parse_request(_validate, {"model": asked}, model_name="base", adapters=adapters)
        assert renamed["model"] == "base"
    assert parse_request(_validate, {"model": "pirate"}, model_name="base")["model"] == "base"
