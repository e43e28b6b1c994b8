"""The one way a route hands an admitted request to its model's bundle, and every such route, built from the table
of operations (``server/frontend/operations.py``: ``OPERATION_SPECS``): :func:`operation_routes`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from litestar import Response, post
from litestar.di import NamedDependency, Provide
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

from server.api.edge import FORM_BODY, form_body_limit
from server.api.errors import ANTHROPIC_API, ANTHROPIC_EXCEPTION_HANDLERS, OPENAI_API
from server.api.openapi import request_body
from server.api.streaming import BundleCall, answer, provide_admission
from server.frontend import OPERATION_SPECS, Operation, OperationSpec

__all__ = ["ADMITTED", "BundleCall", "operation_call", "operation_routes"]

#: The admission dependency: reads the JSON body, admits it to its model and pins that model's bundle (a stream
#: that must wait for its model gets its headers first, and waits in its body: ``waiting.py``).
ADMITTED = {"admitted": Provide(provide_admission)}
# The JSON body is read by the admission dependency; request_body() documents it in the OpenAPI schema.
_BODY_DOC = "An OpenAI (or, under /v1/messages, Anthropic) request object, as vLLM's server takes it."
_FORM_DOC = "An OpenAI audio request: a multipart form with the audio as its `file`, as vLLM's server takes it."


def operation_call(name: Operation) -> BundleCall:
    """The bundle call that runs operation ``name`` on an admitted request's body (every serving route's)."""
    return lambda admitted: admitted.bundle.call(name, admitted.body, admitted.lease.request_id)


def operation_routes() -> list[HTTPRouteHandler]:
    """A POST route for each path of each operation in the table that names one (the rest have handlers of their
    own: the Responses routes, ``/tokenizer_info``), in the table's order."""
    return [
        _route(spec, path, name, summary)
        for spec in OPERATION_SPECS
        if spec.path is not None
        for path, name, summary in _paths(spec)
    ]


def _paths(spec: OperationSpec) -> Iterator[tuple[str, str, str]]:
    """Each path of ``spec``'s route with its handler's name and summary: its own, then vLLM's other paths for it
    (``/v1/score``: ``score_v1``, "As /score.")."""
    assert spec.path is not None
    yield spec.path, spec.handler, spec.summary
    for path in spec.also:
        yield path, f"{spec.handler}_{path.split('/')[1]}", f"As {spec.path}."


def _route(spec: OperationSpec, path: str, name: str, summary: str) -> HTTPRouteHandler:
    """A POST route (a handler named ``name``) that admits the request and answers with ``spec``'s operation.

    Its errors and stream ends are OpenAI's, or Anthropic's for an ``anthropic`` operation; a ``form`` operation's
    body is a multipart form limited to vLLM's audio upload size, and its API (``Transcriptions``) is named in the
    404 of a model without ``forms.FORM_TASK``.
    """
    call = operation_call(spec.name)
    api = ANTHROPIC_API if spec.anthropic else OPENAI_API

    # `admitted` is a `waiting.AdmittedOrWaiting` (declared Any: msgspec refuses a union of two dataclasses).
    async def handler(admitted: NamedDependency[Any]) -> Response[Any] | Stream:
        return await answer(admitted, call, api)

    handler.__name__ = handler.__qualname__ = name  # Litestar derives the OpenAPI summary from it
    handler.__doc__ = summary
    # A form route has its own body limit (vLLM's audio upload limit) and tells the admission to read a form.
    form_options: dict[str, Any] = {"request_max_body_size": form_body_limit()} if spec.form else {}
    decorate = post(
        path,
        operation_class=request_body(spec.body, "multipart/form-data" if spec.form else "application/json"),
        dependencies=ADMITTED,
        status_code=200,
        description=_FORM_DOC if spec.form else _BODY_DOC,
        tags=[spec.tag],
        exception_handlers=ANTHROPIC_EXCEPTION_HANDLERS if spec.anthropic else None,
        opt={FORM_BODY: spec.api if spec.form else None},
        **form_options,
    )
    return decorate(handler)
