"""A serving request's admission at the API, provided through Litestar DI (the engine's queue behind it is its own).

The provider reads the JSON body (the speech routes' multipart form: ``forms.py``), admits the request to the
model it names (or the active one) through the manager, installs the lease's abort hook (the one way a switch
aborts a request: through the bundle that started it), and yields an :class:`AdmittedRequest` whose lease pins
that model's bundle. A non-streaming response is done when the handler returns, so the provider's cleanup
releases the lease; a stream takes the lease over and releases it in its generator's ``finally`` (``delivery.py``),
because Litestar runs a yield dependency's cleanup before it sends a streamed body.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec
from litestar import Request
from litestar.exceptions import ValidationException
from litestar.types import Receive

from server.api.edge import (
    FORM_BODY,
    FORM_TASK,
    allowed_model,
    check_request_bounds,
    read_form_object,
    request_cache_salt,
    request_scope,
    resolve_model_name,
    route_salted,
    salted,
    shown_to,
)
from server.api.errors import RouteUnsupported
from server.engine import EngineError, EngineManager, Lease
from server.frontend import Operation

__all__ = [
    "AbortsRequests",
    "AdmissionTarget",
    "AdmittedRequest",
    "Holder",
    "ServingBundle",
    "admission_target",
    "check_serves_form",
    "install_abort_hook",
    "read_json_object",
]

logger = logging.getLogger("turnout.api")


class AbortsRequests(Protocol):
    """A bundle's abort: ends a request's engine work, including engine requests not submitted yet."""

    async def abort(self, request_id: str) -> Any: ...


A = TypeVar("A", bound=AbortsRequests)


class ServingBundle(AbortsRequests, Protocol):
    """What the API needs of one model's frontend bundle (``server.frontend``'s, or a test fake)."""

    max_model_len: int

    async def call(self, operation: Operation, body: dict[str, Any], request_id: str) -> Any: ...

    async def background_finished(self, response_id: str) -> None: ...

    async def fail_background(self, response_id: str, error: Mapping[str, Any]) -> bool: ...


class Holder(enum.Enum):
    """Who holds an admitted request's lease: the lease ends when the last of them lets go."""

    #: The route that admitted it (its dependency's clean-up, or the waiting stream's body before it streams).
    ROUTE = "route"
    #: Its SSE stream, until the last event was sent (or its client stalled).
    STREAM = "stream"
    #: A background Response's watcher, until the response ends (past the request's own answer).
    BACKGROUND = "background"


@dataclass(eq=False)
class AdmittedRequest:
    """A request admitted to one model, with its parsed body: the one owner of its lease, from admission to the last
    byte. The route holds the lease first; it hands it to a stream (:meth:`hand_to_stream`) or shares it with a
    background response (:meth:`hold_for`); each holder lets go with :meth:`let_go`, and the last one ends the lease
    (the one place that does).

    Attributes:
        manager: The manager that admitted it.
        lease: The lease that pins the model and its bundle.
        body: The request's JSON object.
        asked_as: The alias (``served_model_name``) the client named the model by, when not its own name: the
            answer carries it back.
        keep_alive_s: Seconds of silence after which its stream sends an SSE keep-alive comment (vLLM's
            ``--sse-keep-alive-interval``; 0: never).
        scope: The models its API key may use (None: every model); the errors it gets name no other.
        stall_timeout_s: Seconds its stream may wait for the client to take a chunk before it is ended
            (``server.stream_stall_timeout_s``; 0: never).
        receive: The request's ASGI ``receive``, through which a non-streaming request hears that its client left
            (None: it is not listened for).
    """

    manager: EngineManager[ServingBundle]
    lease: Lease[ServingBundle]
    body: dict[str, Any]
    asked_as: str | None = None
    keep_alive_s: float = 0.0
    scope: frozenset[str] | None = None
    stall_timeout_s: float = 0.0
    receive: Receive | None = None
    _holders: set[Holder] = field(default_factory=lambda: {Holder.ROUTE})

    @property
    def bundle(self) -> ServingBundle:
        """The bundle of the model this request was admitted to."""
        return self.lease.bundle

    @property
    def streamed(self) -> bool:
        """Whether a stream took the lease over from the route."""
        return Holder.STREAM in self._holders

    def hand_to_stream(self) -> None:
        """The route's answer is a stream: the stream holds the lease from now on, until its last event."""
        if Holder.ROUTE in self._holders:
            self._holders.discard(Holder.ROUTE)
            self._holders.add(Holder.STREAM)

    def hold_for(self, holder: Holder) -> None:
        """``holder`` holds the lease too (a background response's watcher, past the request's own answer)."""
        if self._holders:  # never revive an ended lease
            self._holders.add(holder)

    def let_go(self, holder: Holder) -> None:
        """``holder`` is done with the lease (idempotent); the last holder to let go ends it."""
        if holder not in self._holders:
            return
        self._holders.discard(holder)
        if not self._holders:
            self.manager.release(self.lease)

    def shown(self, error: EngineError) -> EngineError:
        """``error`` as this request's key may see it (``key_scopes.shown_to``)."""
        return shown_to(error, self.scope, self.manager.models)

    def as_asked(self, text: str) -> str:
        """``text`` (a JSON body or an SSE chunk) with the model named as the client named it."""
        if self.asked_as is None:
            return text
        # vLLM writes compact JSON, and a quote inside generated text is escaped, so the unescaped key-value
        # pair is only ever the `model` field itself (top-level, or in Anthropic's message_start).
        # str(): a name read from a YAML profile may be a ruamel string subclass, which msgspec does not encode.
        own = '"model":' + msgspec.json.encode(str(self.lease.model)).decode()
        return text.replace(own, '"model":' + msgspec.json.encode(str(self.asked_as)).decode())


async def read_json_object(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """The body as a JSON object; a 400 (never a 500) for anything else."""
    raw = await request.body()
    if not raw.strip():
        raise ValidationException("The request body is empty; send a JSON object.")
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ValidationException(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(body, dict):
        raise ValidationException("The request body must be a JSON object.")
    return body


@dataclass(frozen=True, slots=True)
class AdmissionTarget:
    """What a request asks to be admitted to, read from its body before admission.

    Attributes:
        manager: The manager that admits it.
        body: The request's JSON object.
        requested: The name the client sent (None: the active model).
        name: ``requested`` resolved to the model's own name (for a key limited to some models, the model a
            request naming none must be answered by); None: the manager's choice.
        scope: The models the request's API key may use (None: every model).
        receive: The request's ASGI ``receive`` (see :attr:`AdmittedRequest.receive`).
    """

    manager: EngineManager[ServingBundle]
    body: dict[str, Any]
    requested: str | None
    name: str | None
    scope: frozenset[str] | None = None
    receive: Receive | None = None

    def admitted(self, lease: Lease[ServingBundle], *, keep_alive_s: float, stall_timeout_s: float) -> AdmittedRequest:
        """The admitted request for ``lease`` (its abort hook installed), its stream timed as given."""
        install_abort_hook(lease)
        asked_as = self.requested if self.requested != self.name else None
        return AdmittedRequest(
            manager=self.manager,
            lease=lease,
            body=self.body,
            asked_as=asked_as,
            keep_alive_s=keep_alive_s,
            stall_timeout_s=stall_timeout_s,
            receive=self.receive,
            scope=self.scope,
        )

    def shown(self, error: EngineError) -> EngineError:
        """``error`` as this request's key may see it (``key_scopes.shown_to``)."""
        return shown_to(error, self.scope, self.manager.models)


async def admission_target(request: Request[Any, Any, Any], manager: EngineManager[ServingBundle]) -> AdmissionTarget:
    """Read the body and the model it names; refuse a model the request's API key may not use.

    The body gets the ``cache_salt`` of the key's cache group (``cache_salts.salted``), on every route but those
    listed in :data:`~server.api.edge.cache_salts.UNSALTED_ROUTES`: the Ray node admits here too, so both salt alike.

    Raises:
        ValidationException: the body is not a JSON object, its ``model`` not a string, or its ``cache_salt`` not
            a non-empty string.
        RequestOutOfBounds: the body asks its model for more than the model's bounds allow (``request_bounds``).
        ModelNotFound: the model is not one the key may use (see ``key_scopes.allowed_model``, which also picks
            the model a request naming none goes to, for a key limited to some).
        RouteUnsupported: a form route's model lacks ``forms.FORM_TASK`` (known before it loads): refused before
            admission, which in auto mode would move the device to it first.
    """
    # The speech routes take vLLM's multipart forms (their handlers set FORM_BODY); every other route JSON.
    form_api: str | None = request.route_handler.opt.get(FORM_BODY)
    body = await (read_form_object(request) if form_api else read_json_object(request))
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ValidationException("'model' must be a string.")
    resolved = resolve_model_name(manager.models, model or None)
    name = allowed_model(request, model or None, resolved, manager.active_model, manager.switching_to)
    if form_api:
        await check_serves_form(manager, name or manager.switching_to or manager.active_model, form_api)
    scope = request_scope(request)
    if route_salted(request):
        body = salted(body, request_cache_salt(request))
    # Before admission: a request no engine should run never waits for the device, nor moves it.
    bounded_by = manager.models.get(name or manager.switching_to or manager.active_model or "")
    if bounded_by is not None:
        check_request_bounds(body, bounded_by)
    return AdmissionTarget(
        manager=manager, body=body, requested=model or None, name=name, scope=scope, receive=request.receive
    )


async def check_serves_form(manager: EngineManager[Any], model: str | None, api: str) -> None:
    """Refuse a form for ``model`` when its tasks, known before it loads, lack ``forms.FORM_TASK``: before
    admission here, and before a Ray node replica loads the model it was placed by (``server/cluster/node.py``).

    Args:
        manager: The manager that knows the models' tasks.
        model: The model the form goes to (None: nothing to check).
        api: The route's API (``Transcriptions``), named in the 404.

    Raises:
        RouteUnsupported: The model's tasks lack ``FORM_TASK`` (404, the body the model's bundle would give).
    """
    if model is None:
        return
    tasks = await manager.tasks(model)
    if tasks is not None and FORM_TASK not in tasks:
        raise RouteUnsupported(model, api)


def install_abort_hook(lease: Lease[A]) -> None:
    """Let a switch abort the leased request through the bundle it was admitted to (and only that way)."""
    bundle, request_id = lease.bundle, lease.request_id
    lease.abort_hook = lambda: bundle.abort(request_id)
