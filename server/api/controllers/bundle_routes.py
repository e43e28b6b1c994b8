"""The one way a route hands an admitted request to its model's bundle: :func:`bundle_route`."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, post
from litestar.di import NamedDependency, Provide
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

from server.api.edge import FORM_BODY, form_body_limit
from server.api.errors import OPENAI_API, ApiShape
from server.api.openapi import request_body
from server.api.streaming import BundleCall, answer, provide_admission
from server.frontend import Operation

__all__ = ["ADMITTED", "BundleCall", "bundle_route", "operation_call"]

#: The admission dependency: reads the JSON body, admits it to its model and pins that model's bundle (a stream
#: that must wait for its model gets its headers first, and waits in its body: ``waiting.py``).
ADMITTED = {"admitted": Provide(provide_admission)}
# The JSON body is read by the admission dependency; request_body() documents it in the OpenAPI schema.
_BODY_DOC = "An OpenAI (or, under /v1/messages, Anthropic) request object, as vLLM's server takes it."
_FORM_DOC = "An OpenAI audio request: a multipart form with the audio as its `file`, as vLLM's server takes it."


def operation_call(name: Operation) -> BundleCall:
    """The bundle call that runs operation ``name`` on an admitted request's body (every serving route's)."""
    return lambda admitted: admitted.bundle.call(name, admitted.body, admitted.lease.request_id)


def bundle_route(
    path: str,
    component: str,
    name: str,
    call: BundleCall,
    summary: str,
    api: ApiShape = OPENAI_API,
    *,
    form: str | None = None,
) -> HTTPRouteHandler:
    """A POST route (a controller method named ``name``) that admits the request and answers with ``call``.

    Args:
        path: The route's path below the controller's.
        component: The OpenAPI component of the request body (see :func:`request_body`).
        name: The handler's name (Litestar derives the OpenAPI operation id from it).
        call: The bundle call for the admitted request.
        summary: The handler's docstring (the operation's summary in the OpenAPI document).
        api: The API the route speaks: its error bodies and how its streams end.
        form: The body is a multipart form (vLLM's speech routes), limited to vLLM's audio upload size: the name
            of the route's API (``Transcriptions``), named in the 404 of a model without ``forms.FORM_TASK``.
    """

    # `admitted` is a `waiting.AdmittedOrWaiting` (declared Any: msgspec refuses a union of two dataclasses).
    async def handler(self: Controller, admitted: NamedDependency[Any]) -> Response[Any] | Stream:
        return await answer(admitted, call, api)

    handler.__name__ = handler.__qualname__ = name
    handler.__doc__ = summary
    # A form route has its own body limit (vLLM's audio upload limit) and tells the admission to read a form.
    form_options: dict[str, Any] = {"request_max_body_size": form_body_limit()} if form else {}
    opt = {FORM_BODY: form}
    decorate = post(
        path,
        operation_class=request_body(component, "multipart/form-data" if form else "application/json"),
        dependencies=ADMITTED,
        status_code=200,
        description=_FORM_DOC if form else _BODY_DOC,
        opt=opt,
        **form_options,
    )
    return decorate(handler)
