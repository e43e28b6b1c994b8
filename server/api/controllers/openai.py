"""``/v1/models`` and ``/tokenizer_info``: the OpenAI routes with handlers of their own (the serving routes are the
table's: ``bundle_routes.py``)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency

from server.api.admission import AdmittedRequest, Holder, ServingBundle
from server.api.controllers.model_cards import model_card, served_names
from server.api.edge import allowed_model, is_admin, visible
from server.api.settings import ApiSettings
from server.api.streaming import respond
from server.engine import EngineManager

__all__ = ["OpenAIController", "tokenizer_info"]


class OpenAIController(Controller):
    """``/v1``: the model list."""

    path = "/v1"
    tags = ["OpenAI"]

    @get("/models")
    async def list_models(
        self,
        request: Request[Any, Any, Any],
        manager: NamedDependency[EngineManager[ServingBundle]],
        api_settings: NamedDependency[ApiSettings],
    ) -> dict[str, Any]:
        """Every configured model (and alias) in OpenAI's shape, with its ``status``, whether it is ``active``,
        and its ``restart`` plan while its engine is dead.

        A key limited to some models (``server.api_keys``) sees only those. The folders (``root``) are shown
        only to the admin (the admin token, or dev mode without one), as ``/status`` shows paths.
        """
        admin = is_admin(request, api_settings)
        active = manager.active_model
        snapshot = {slot.name: slot for slot in manager.snapshot().slots}
        created = int(time.time())
        cards: list[dict[str, Any]] = []
        for name, profile in manager.models.items():
            if not visible(request, name):
                continue
            slot = snapshot[name]
            max_len = slot.max_model_len or profile.engine_args.get("max_model_len")
            # An alias (served_model_name) is a name of its own, as in vLLM's list; `parent` says whose. So is a
            # LoRA adapter, whose `root` is its folder (as vLLM lists adapters).
            names = [(card, profile.model) for card in served_names(name, profile.aliases)]
            names += list((profile.lora_modules or {}).items())
            restart = msgspec.to_builtins(slot.restart) if slot.restart is not None else None
            cards += [
                # While its engine is dead, `restart`: restarts so far, the limit, the next one (or none).
                model_card(
                    card_id,
                    name,
                    created=created,
                    root=root if admin else None,
                    status=slot.state,
                    active=name == active,
                    max_model_len=max_len,
                    restart=restart,
                )
                for card_id, root in names
            ]
        return {"object": "list", "data": cards}


@get("/tokenizer_info", tags=["Tokenization"])
async def tokenizer_info(
    request: Request[Any, Any, Any], manager: NamedDependency[EngineManager[ServingBundle]]
) -> Response[Any]:
    """The active model's tokenizer configuration and chat template (``--enable-tokenizer-info-endpoint``)."""
    # A GET names no model: it is the active one's (in auto mode, the default's when none is active), as for the
    # Responses retrieve route; a key limited to some models gets only one of those. Nothing reaches the engine,
    # so no abort hook is needed.
    lease = await manager.acquire(allowed_model(request, None, None, manager.active_model, manager.switching_to))
    admitted = AdmittedRequest(manager=manager, lease=lease, body={})
    try:
        response = respond(admitted, await lease.bundle.call("tokenizer_info", {}, lease.request_id))
        assert isinstance(response, Response)  # a JSON answer, never a stream
        return response
    finally:
        admitted.let_go(Holder.ROUTE)
