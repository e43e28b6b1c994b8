"""A request that names a LoRA adapter is admitted for the adapter's base model; ``/v1/models`` lists adapters."""

from __future__ import annotations

from server.profiles.schema import ModelProfile, Switching
from tests.api.conftest import MakeClient, admin

MODELS = {
    "tools": ModelProfile(model="/m/tools", lora_modules={"tools-pirate": "/a/pirate"}),
    "plain": ModelProfile(model="/m/plain", lora_modules={"plain-poet": "/a/poet", "plain-chef": "/a/chef"}),
}


async def test_the_model_list_names_each_adapter_with_its_base_as_parent(make_client: MakeClient) -> None:
    client, _ = await make_client(models=MODELS)
    cards = {card["id"]: card for card in (await client.get("/v1/models", headers=admin())).json()["data"]}
    assert set(cards) == {"tools", "tools-pirate", "plain", "plain-poet", "plain-chef"}
    # The folders only to the admin.
    assert {card["root"] for card in (await client.get("/v1/models")).json()["data"]} == {None}
    assert cards["tools-pirate"]["parent"] == "tools" and cards["tools-pirate"]["root"] == "/a/pirate"
    assert cards["tools-pirate"]["active"] is True
    assert cards["plain-chef"]["parent"] == "plain" and cards["plain-chef"]["active"] is False
    assert cards["plain"]["parent"] is None and cards["plain"]["root"] == "/m/plain"


async def test_manual_mode_serves_an_adapter_of_the_active_model_and_refuses_the_others(
    make_client: MakeClient,
) -> None:
    client, manager = await make_client(models=MODELS)
    served = await client.post("/v1/chat/completions", json={"model": "tools-pirate", "messages": []})
    assert served.status_code == 200 and served.json()["model"] == "tools-pirate"
    # The adapter of the inactive model is that model: 409, as for its own name, and nothing switches.
    refused = await client.post("/v1/chat/completions", json={"model": "plain-poet", "messages": []})
    assert refused.status_code == 409 and "plain" in refused.json()["error"]["message"]
    assert manager.active_model == "tools"
    unknown = await client.post("/v1/chat/completions", json={"model": "no-such-adapter", "messages": []})
    assert unknown.status_code == 404


async def test_auto_mode_switches_to_the_adapters_base(make_client: MakeClient) -> None:
    client, manager = await make_client(models=MODELS, switching=Switching(mode="auto"))
    answer = await client.post("/v1/chat/completions", json={"model": "plain-chef", "messages": []})
    assert answer.status_code == 200 and answer.json()["model"] == "plain-chef"
    assert manager.active_model == "plain"
