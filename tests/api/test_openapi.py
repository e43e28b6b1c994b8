"""The OpenAPI document describes every request body (vLLM's request models) and the bearer schemes."""

from __future__ import annotations

from typing import Any

import pytest

from server.api import ApiSettings, create_app
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy
from server.profiles.schema import ModelProfile
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader

BODIES = {
    "/v1/chat/completions": "ChatCompletionRequest",
    "/v1/completions": "CompletionRequest",
    "/v1/embeddings": "EmbeddingRequest",
    "/tokenize": "TokenizeRequest",
    "/detokenize": "DetokenizeRequest",
}


def _document(request_schemas: Any = None, **settings: Any) -> dict[str, Any]:
    manager: EngineManager[Any] = EngineManager(
        {"tools": ModelProfile(model="/m/tools")}, KeepStrategy(FakeLoader()), build_fake_serving_bundle
    )
    app = create_app(manager, ApiSettings(**settings), request_schemas=request_schemas)
    document: dict[str, Any] = app.openapi_schema.to_schema()
    return document


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(value) for value in node))
    return set()


@pytest.fixture(scope="module")
def vllm_schemas() -> dict[str, Any]:
    from server.frontend.vllm_adapter import request_body_schemas

    return request_body_schemas()


def test_every_post_route_documents_its_body() -> None:
    document = _document(admin_token="t")
    for path, item in document["paths"].items():
        if "post" in item and path != "/v1/responses/{response_id}/cancel":  # body-less, as OpenAI's
            assert item["post"].get("requestBody", {}).get("required") is True, path
    for path, component in BODIES.items():
        schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{component}"}
        assert document["components"]["schemas"][component]["type"] == "object"  # no vLLM schemas given


def test_admin_routes_need_the_bearer_token_and_the_openai_ones_the_key_when_set() -> None:
    document = _document(admin_token="t")
    schemes = document["components"]["securitySchemes"]
    assert schemes["AdminToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["AdminToken"]["description"],
    }
    assert document["paths"]["/v1/models/switch"]["post"]["security"] == [{"AdminToken": []}]
    assert document["paths"]["/admin/status"]["get"]["security"] == [{"AdminToken": []}]
    assert "security" not in document["paths"]["/v1/chat/completions"]["post"]
    keyed = _document(admin_token="t", api_key="k")
    assert keyed["paths"]["/v1/chat/completions"]["post"]["security"] == [{"ApiKey": []}]
    assert "security" not in keyed["paths"]["/health"]["get"]


def test_vllms_request_models_are_the_bodies_and_every_reference_resolves(vllm_schemas: dict[str, Any]) -> None:
    document = _document(vllm_schemas, admin_token="t")
    components = document["components"]["schemas"]
    chat = components["ChatCompletionRequest"]
    assert {"messages", "model", "max_tokens", "temperature", "stream", "tools"} <= set(chat["properties"])
    assert "messages" in chat["required"]
    assert "prompt" in components["CompletionRequest"]["properties"]
    assert len(components["TokenizeRequest"]["anyOf"]) == 2
    assert components["SwitchRequest"]["required"] == ["model"]  # Litestar's own components stay
    missing = {ref for ref in _refs(document) if ref.removeprefix("#/components/schemas/") not in components}
    assert missing == set()
