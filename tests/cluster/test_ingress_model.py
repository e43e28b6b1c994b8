"""The ingress reads the model a request names from a JSON body and from a speech route's multipart form."""

from __future__ import annotations

from typing import Any

import httpx
from litestar import Litestar, Request, post

from server.cluster.ingress import _requested_model


def _app() -> Litestar:
    @post("/{path:path}", status_code=200)
    async def probe(request: Request[Any, Any, Any]) -> dict[str, Any]:
        return {"model": await _requested_model(request, await request.body(), "default")}

    return Litestar(route_handlers=[probe])


async def test_the_model_of_a_json_body_and_of_a_form() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://ingress") as client:
        form = await client.post("/v1/audio/transcriptions", data={"model": "speech"}, files={"file": ("a", b"x")})
        assert form.json() == {"model": "speech"}
        unnamed = await client.post("/v1/audio/transcriptions", files={"file": ("a", b"x")})
        assert unnamed.json() == {"model": "default"}
        assert (await client.post("/v1/chat/completions", json={"model": "tools"})).json() == {"model": "tools"}
        assert (await client.post("/v1/chat/completions", content=b"{")).json() == {"model": "default"}
