"""Parity with vLLM's own server, read from vLLM: every route `build_app` registers for a model's tasks is Turnout's.

For each task set, the installed vLLM's `build_app(args, supported_tasks, model_config)` is built (no engine: the app
only registers routers) and its (method, path) pairs, less `EXCLUDED` (operator routes of one engine, each with
its reason), must all be Turnout's. Turnout registers every route once, for every model, and answers a route its
model's tasks lack with a 404 naming the model. A vLLM upgrade that adds a route fails
`test_turnout_serves_every_route_vllm_registers`; a Turnout route that no longer matches vLLM fails
`test_every_turnout_serving_route_is_one_of_vllms`.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pytest
import vllm

from server.api import ApiSettings, create_app
from server.engine import EngineManager
from server.engine.strategies import KeepStrategy
from server.frontend.vllm_adapter import OPERATIONS_VLLM_LACKS
from server.profiles.schema import ModelProfile
from server.profiles.vllm_version import install_hint
from tests.fakes.bundles import build_fake_serving_bundle
from tests.fakes.engines import FakeLoader

Route = tuple[str, str]

#: vLLM routes Turnout does not serve, with why. Keep it short: each entry is a decision, not an oversight.
EXCLUDED: Final[dict[Route, str]] = {
    ("GET", "/docs/oauth2-redirect"): "FastAPI's Swagger OAuth helper; Turnout's Swagger UI is /docs",
    ("GET", "/redoc"): "a second docs UI; Turnout documents the same OpenAPI at /docs and /openapi.json",
    ("GET", "/load"): "one engine's load counter (--enable-server-load-tracking); Turnout reports /admin/status",
    ("GET", "/kv_event_sources"): "one engine's KV-cache event publishers, for a KV-aware router in front of it",
    ("GET", "/ping"): "SageMaker's container health contract (one model per container)",
    ("POST", "/ping"): "SageMaker's container health contract (one model per container)",
    ("POST", "/invocations"): "SageMaker's single-model invocation route; the model is what Turnout routes on",
    ("POST", "/scale_elastic_ep"): "elastic expert-parallel scaling of one engine",
    ("POST", "/is_scaling_elastic_ep"): "elastic expert-parallel scaling of one engine",
    ("POST", "/inference/v1/generate"): "scale-out: token-in/token-out for an external router of one engine",
    ("POST", "/inference/v1/abort_requests"): "scale-out: token-in/token-out for an external router of one engine",
    ("POST", "/v1/chat/completions/render"): "scale-out: a disaggregated renderer for one engine",
    ("POST", "/v1/completions/render"): "scale-out: a disaggregated renderer for one engine",
    ("POST", "/v1/responses/render"): "scale-out: a disaggregated renderer for one engine",
    ("POST", "/v1/messages/render"): "scale-out: a disaggregated renderer for one engine",
    ("POST", "/v1/chat/completions/derender"): "scale-out: a disaggregated renderer for one engine",
    ("POST", "/v1/completions/derender"): "scale-out: a disaggregated renderer for one engine",
    ("GET", "/v1/realtime"): (
        "a WebSocket session (OpenAI's Realtime API), registered only for realtime ASR models (Voxtral Realtime, "
        "Qwen3-ASR Realtime), not Whisper: an open-ended session needs a lease and a drain rule of its own (a "
        "switch must close the socket), and there is no tiny realtime model to test that on"
    ),
}

#: Routes of Turnout's own (multi-model operation), which vLLM's single-model server has no counterpart for.
TURNOUT_ONLY: Final = {
    ("POST", "/v1/models/switch"),
    ("GET", "/admin/status"),
    ("GET", "/admin/costs"),
    ("POST", "/admin/reload"),
    ("POST", "/admin/models/{name}/load"),
    ("POST", "/admin/models/{name}/unload"),
    ("GET", "/ready"),
    ("GET", "/status"),
    # Litestar's Swagger UI under /docs (vLLM's FastAPI serves /docs itself and the rest from a CDN).
    ("GET", "/docs/openapi.json"),
    ("GET", "/docs/oauth2-redirect.html"),
    ("GET", "/docs/{path}"),
}


#: Routes of features older supported vLLMs lack, by operation: Turnout answers them 404 on such a vLLM.
NEWER_ROUTES: Final = {("POST", "/v1/systemone"): "structured_decision"}


@dataclass(frozen=True)
class _ModelConfig:
    """What `build_app` reads of a model config to pick the pooling routers (a pooling task, its label count)."""

    pooling_task: str | None
    num_labels: int = 2

    def get_pooling_task(self, supported_tasks: tuple[str, ...]) -> str | None:
        return self.pooling_task

    @property
    def hf_config(self) -> Any:
        return type("HFConfig", (), {"num_labels": self.num_labels})()


#: The task sets of the issue: a generate model, an embedding model, a classifier, a cross-encoder (score), and
#: the speech models.
TASK_SETS: Final[dict[str, tuple[tuple[str, ...], _ModelConfig | None]]] = {
    "generate": (("generate",), None),
    "embed": (("embed",), _ModelConfig("embed")),
    "classify": (("classify",), _ModelConfig("classify", num_labels=2)),
    "score": (("classify",), _ModelConfig("classify", num_labels=1)),
    # A speech model (Whisper: vLLM's `transcription` task), and a realtime ASR model (Voxtral Realtime).
    "speech": (("generate", "transcription"), None),
    "realtime": (("generate", "transcription", "realtime"), None),
}


#: Where vLLM's server keeps its app builder and argument parser, newest first (0.33, 0.32, 0.26 to 0.31): the
#: compatibility run (scripts/compat.sh) reads the routes of an older vLLM too.
_VLLM_SERVER: Final = {
    "build_app": ("vllm.entrypoints.launchers.app", "vllm.entrypoints.openai.api_server"),
    "make_arg_parser": (
        "vllm.entrypoints.common.cli_args",
        "vllm.entrypoints.launchers.cli_args",
        "vllm.entrypoints.openai.cli_args",
    ),
}


def _vllm_server(name: str) -> Any:
    for module_name in _VLLM_SERVER[name]:
        try:
            return getattr(importlib.import_module(module_name), name)
        except (ModuleNotFoundError, AttributeError):
            continue
    raise ImportError(f"no {name} in {_VLLM_SERVER[name]}")


def _vllm_routes(tasks: tuple[str, ...], model_config: Any) -> set[Route]:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    build_app, make_arg_parser = _vllm_server("build_app"), _vllm_server("make_arg_parser")

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "m"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # vLLM's own deprecation notices are not ours to fail on
        app = build_app(args, tasks, model_config)  # type: ignore[arg-type]
    routes: set[Route] = set()
    for route in app.routes:
        # A mount (Prometheus' /metrics app) has no methods: it answers GET.
        for method in getattr(route, "methods", None) or {"GET"}:
            if method != "HEAD":  # Starlette adds HEAD to every GET route; no client calls it
                routes.add((method, route.path))
    return routes


def _turnout_routes() -> set[Route]:
    manager: EngineManager[Any] = EngineManager(
        {"m": ModelProfile(model="/m")}, KeepStrategy(FakeLoader()), build_fake_serving_bundle
    )
    app = create_app(manager, ApiSettings())
    routes: set[Route] = set()
    for route in app.routes:
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)  # Litestar's typed parameters, as FastAPI writes them
        for method in getattr(route, "methods", ()):
            if method not in ("HEAD", "OPTIONS"):
                routes.add((method, path))
    return routes


@pytest.fixture(scope="module")
def vllm_routes() -> Iterator[dict[str, set[Route]]]:
    with pytest.MonkeyPatch.context() as env:
        env.delenv("VLLM_SERVER_DEV_MODE", raising=False)  # dev routes are off in a served vLLM, as in Turnout
        yield {name: _vllm_routes(tasks, config) for name, (tasks, config) in TASK_SETS.items()}


@pytest.fixture(scope="module")
def turnout_routes() -> set[Route]:
    return _turnout_routes()


@pytest.mark.parametrize("task_set", sorted(TASK_SETS))
def test_turnout_serves_every_route_vllm_registers(
    task_set: str, vllm_routes: dict[str, set[Route]], turnout_routes: set[Route]
) -> None:
    missing = vllm_routes[task_set] - set(EXCLUDED) - turnout_routes
    assert missing == set(), f"vLLM's server has these {task_set} routes and Turnout does not: {sorted(missing)}"


def test_every_turnout_serving_route_is_one_of_vllms(
    vllm_routes: dict[str, set[Route]], turnout_routes: set[Route]
) -> None:
    every_vllm_route = set().union(*vllm_routes.values())
    lacking = {route for route, operation in NEWER_ROUTES.items() if operation in OPERATIONS_VLLM_LACKS}
    assert turnout_routes - TURNOUT_ONLY - lacking - every_vllm_route == set()


def test_every_exclusion_is_still_a_vllm_route(vllm_routes: dict[str, set[Route]]) -> None:
    # An exclusion vLLM dropped is dead weight that would hide a route re-added under the same name. The list
    # follows the project's main vLLM; an older one (scripts/compat.sh) lacks some of its newer routes.
    if vllm.__version__ not in install_hint():
        pytest.skip(f"exclusions follow the main vLLM ({install_hint()}), not {vllm.__version__}")
    assert set(EXCLUDED) - set().union(*vllm_routes.values()) == set()


def test_the_pooling_task_sets_differ_as_vllms_routers_do(vllm_routes: dict[str, set[Route]]) -> None:
    # The stand-in model config must really steer vLLM's routers, or the pooling comparisons prove nothing.
    assert ("POST", "/v1/embeddings") in vllm_routes["embed"] - vllm_routes["classify"]
    assert ("POST", "/classify") in vllm_routes["classify"]
    assert ("POST", "/v2/rerank") in vllm_routes["score"] - vllm_routes["classify"]
    assert ("POST", "/v1/responses") in vllm_routes["generate"] - vllm_routes["embed"]


def test_the_speech_task_set_adds_vllms_audio_routes(vllm_routes: dict[str, set[Route]]) -> None:
    # Whisper's tasks really steer vLLM's speech routers; only realtime ASR models add the WebSocket session.
    audio = {("POST", "/v1/audio/transcriptions"), ("POST", "/v1/audio/translations")}
    assert vllm_routes["speech"] - vllm_routes["generate"] == audio
    assert vllm_routes["realtime"] - vllm_routes["speech"] == {("GET", "/v1/realtime")}
