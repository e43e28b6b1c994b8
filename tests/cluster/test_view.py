"""The cluster's pure parts (no Ray needed): a replica's capacity per strategy, and the merged cluster view."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from server.api import error_response
from server.cluster import MAX_ONGOING_REQUESTS, node_options
from server.cluster.parts import import_builder
from server.cluster.view import PREFERENCE, merged_models, replica_summaries
from server.engine import EngineError, ModelNotFound, ModelSwitching, NoActiveModel, SlotState
from server.engine.strategies.select import models_held_at_once
from tests.fakes.memory_plans import GIB, budget_plan


@pytest.mark.parametrize(
    ("strategy", "max_active", "models", "capacity"),
    [
        ("stop", 3, 4, 1),
        ("reconfigure", None, 4, 1),
        ("stash", 2, 4, 4),  # a stashed model comes back without a start, as an asleep one does
        ("keep", 2, 4, 2),
        ("sleep", 3, 4, 4),  # max_active limits keep only
        ("keep", None, 4, 4),  # unset: memory is the limit, every model may be held
        ("keep", 9, 4, 4),  # never more than the profile has
    ],
)
def test_capacity_follows_the_strategy(strategy: str, max_active: int | None, models: int, capacity: int) -> None:
    assert models_held_at_once(strategy, max_active, models) == capacity


def test_under_a_memory_budget_keep_holds_the_most_models_that_fit() -> None:
    plan = budget_plan({"a": 3 * GIB, "b": 2 * GIB, "c": 2 * GIB}, 5 * GIB)
    assert models_held_at_once("keep", None, 3, plan) == 2  # any two fit, never three
    assert models_held_at_once("keep", 1, 3, plan) == 1  # max_active caps it still
    assert models_held_at_once("stop", None, 3, plan) == 1
    assert models_held_at_once("sleep", None, 3, plan) == 3  # no budget residency there: the plan is not theirs


def _report(pid: int, states: dict[str, str], held: list[str]) -> dict[str, Any]:
    active = next((name for name, state in states.items() if state == "active"), None)
    return {
        "pid": pid,
        "capacity": 1,
        "held": held,
        "held_unloaded": {},
        "loads": len(held),
        "evictions": 0,
        "counters": {},
        "models": {name: f"/m/{name}" for name in states},
        "aliases": {"a": ["a", "alias-a"]},
        "manager": {"active_model": active, "slots": [{"name": n, "state": s} for n, s in states.items()]},
    }


def test_the_model_list_merges_every_replica() -> None:
    reports = {
        "r2": _report(2, {"a": "stopped", "b": "active", "c": "stopped"}, ["b"]),
        "r1": _report(1, {"a": "active", "b": "stopped", "c": "failed"}, ["a"]),
    }
    cards = {card["id"]: card for card in merged_models(reports, created=7)["data"]}
    assert list(cards) == ["a", "alias-a", "b", "c"]
    assert cards["a"]["status"] == "active" and cards["a"]["active"]
    assert cards["a"]["replicas"] == {"r1": "active", "r2": "stopped"}
    assert cards["alias-a"]["parent"] == "a" and cards["alias-a"]["status"] == "active"
    assert cards["b"]["replicas"] == {"r1": "stopped", "r2": "active"}
    assert cards["c"]["status"] == "failed" and not cards["c"]["active"]
    assert merged_models({}, created=7) == {"object": "list", "data": []}
    assert {card["root"] for card in cards.values()} == {None}  # folders only to the admin


def test_the_cluster_list_shows_a_key_its_models_and_the_admin_the_folders() -> None:
    reports = {"r1": _report(1, {"a": "active", "b": "stopped", "c": "failed"}, ["a"])}
    limited = merged_models(reports, created=7, sees=lambda name: name == "b")
    assert [(card["id"], card["root"]) for card in limited["data"]] == [("b", None)]
    admin = merged_models(reports, created=7, admin=True)
    assert [(card["id"], card["root"]) for card in admin["data"]] == [
        ("a", "/m/a"),
        ("alias-a", "/m/a"),
        ("b", "/m/b"),
        ("c", "/m/c"),
    ]


def test_every_slot_state_has_its_rank_in_the_merged_status() -> None:
    # The ranking names the engine's states, not copies of their strings: a new state must be ranked here.
    assert len(set(PREFERENCE)) == len(PREFERENCE)
    assert set(PREFERENCE) | {SlotState.STOPPED} == set(SlotState)


def test_the_status_lists_replicas_in_order_with_what_each_holds() -> None:
    reports = {"r2": _report(2, {"b": "active"}, ["b"]), "r1": _report(1, {"a": "active"}, ["a"])}
    summaries = replica_summaries(reports)
    assert [(s["replica"], s["held"], s["active_model"]) for s in summaries] == [("r1", ["a"], "a"), ("r2", ["b"], "b")]


def test_a_builder_is_named_module_colon_function() -> None:
    assert import_builder("server.engine.strategies.select:models_held_at_once") is models_held_at_once
    with pytest.raises(ValueError, match="module:function"):
        import_builder("server.cluster.parts")


def test_the_cli_and_a_config_file_build_the_application_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # `turnout ray-serve` and a Ray Serve config file's `app_builder` state neither the options nor the defaults.
    pytest.importorskip("ray.serve")
    from server.cli.ray_serve import ray_serve
    from server.cluster import application

    built: dict[str, Any] = {}
    monkeypatch.setattr(application, "build_application", lambda **kwargs: built.update(kwargs))
    application.app_builder({"profile": "profile.yaml", "dev": True})
    expected = {"profile": "profile.yaml", "dev": True, "host": None}
    assert built["options"] == node_options("profile.yaml", dev=True) == expected
    application.app_builder({"profile": "profile.yaml", "host": "127.0.0.1"})
    assert built["options"]["host"] == "127.0.0.1"
    cli_default = next(param.default for param in ray_serve.params if param.name == "max_ongoing_requests")
    assert built["max_ongoing_requests"] == cli_default == MAX_ONGOING_REQUESTS


class _Unsure(EngineError):
    status_code = 503
    code = "unsure"  # a 503 whose cause does not say when: the default wait


class _Now(EngineError):
    status_code = 503
    code = "now"
    retry_after = 0


@pytest.mark.parametrize(
    "error",
    [ModelSwitching("a", "b", "c"), NoActiveModel("none serves"), ModelNotFound("x", ["a"]), _Unsure("?"), _Now("!")],
    ids=lambda error: error.code,
)
def test_a_node_answers_an_engine_error_as_one_server_does(error: EngineError) -> None:
    pytest.importorskip("ray.serve")
    from server.cluster.node import error_items

    start, body = error_items(error)
    response = error_response(error.status_code, error.message, code=error.code, retry_after=error.retry_after)
    response.content["error"].update(error.details())
    assert start["status"] == response.status_code
    assert msgspec.json.decode(body["body"]) == response.content
    assert dict(start["headers"]).get(b"retry-after", b"").decode() == response.headers.get("Retry-After", "")
