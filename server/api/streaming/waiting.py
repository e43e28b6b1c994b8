"""Feedback for a streaming request that waits for its model: SSE comments until it is admitted, then the stream.

A request waits when its model is being switched to or loaded (the auto mode queue, or a manual switch under
``stop``). Without feedback the client sees nothing until the switch ends, and a proxy with an idle timeout cuts
the connection. So a streaming request that is not admitted within :data:`WAIT_NOTICE_AFTER_S` gets its headers
at once and an SSE comment (``: waiting for 'NAME' to load``) every few seconds; SSE clients ignore comments, so
the first data chunk is what it always is. A request admitted in time (nearly all of them) is answered as before,
its errors as proper HTTP statuses; a waiting one's errors come as its API's error event, as after a switch.

vLLM's ``--sse-keep-alive-interval`` uses the same comment mechanism: ``delivery.with_keep_alive`` sends
``: keep-alive`` whenever a stream is idle that long (between tokens, in prefill).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from litestar import Request
from litestar.di import NamedDependency

from server.api.admission import (
    AdmissionTarget,
    AdmittedRequest,
    Holder,
    ServingBundle,
    admission_target,
)
from server.api.errors import ApiShape
from server.api.settings import ApiSettings
from server.api.streaming.delivery import BundleCall, event_stream
from server.api.streaming.disconnects import unless_client_leaves
from server.engine import EngineError, EngineManager, Lease
from server.frontend import StreamResult

__all__ = [
    "WAIT_NOTICE_AFTER_S",
    "AdmittedOrWaiting",
    "WaitingRequest",
    "provide_admission",
]

#: How long admission may take before a streaming request is answered with headers and waiting comments.
WAIT_NOTICE_AFTER_S: Final = 0.5
#: How long a finished admission waits for its SSE body to start before it gives its lease back: the body starts
#: milliseconds after the route returns, unless the client left in between (then nothing ever reads it).
UNCLAIMED_LEASE_S: Final = 5.0


class Wait(enum.Enum):
    """Where a waiting request's admission stands."""

    #: Queued; its SSE body has not started (Litestar may never start it: a client that left after the headers).
    QUEUED = "queued"
    #: Its SSE body started: the body owns the admission from then on.
    CLAIMED = "claimed"
    #: Given up (its client left, or the body never started): a lease it got went back.
    ABANDONED = "abandoned"


@dataclass(eq=False)
class WaitingRequest:
    """A streaming request whose admission is still under way.

    Attributes:
        target: What the request asked for.
        acquiring: The admission; its result is the request's lease.
        shown_name: The model named in the waiting comments (as the client named it).
        interval_s: Seconds between two waiting comments.
        keep_alive_s: ``--sse-keep-alive-interval`` for the stream once it runs (0: none).
        stall_timeout_s: ``server.stream_stall_timeout_s`` for the stream once it runs (0: none).
    """

    target: AdmissionTarget
    acquiring: asyncio.Future[Lease[ServingBundle]]
    shown_name: str
    interval_s: float
    keep_alive_s: float = 0.0
    stall_timeout_s: float = 0.0
    state: Wait = Wait.QUEUED

    def __post_init__(self) -> None:
        # A client that leaves after the headers but before Litestar starts the body leaves a body nobody reads,
        # so its finally never runs: the admission itself then gives back the lease nobody took.
        self.acquiring.add_done_callback(self._unclaimed_check)

    def _unclaimed_check(self, _: asyncio.Future[Any]) -> None:
        if self.state is Wait.QUEUED:
            asyncio.get_running_loop().call_later(UNCLAIMED_LEASE_S, self._release_if_unclaimed)

    def _release_if_unclaimed(self) -> None:
        if self.state is Wait.QUEUED:
            self.abandon()

    def events(self, call: BundleCall, api: ApiShape) -> AsyncIterator[str]:
        """The SSE body: waiting comments until admitted, then the bundle's stream (or the error that ended it)."""
        return self._events(call, api)

    async def _events(self, call: BundleCall, api: ApiShape) -> AsyncIterator[str]:
        if self.state is Wait.ABANDONED:
            return  # given up before the body started: its lease went back
        self.state = Wait.CLAIMED
        comment = f": waiting for {self.shown_name!r} to load\n\n"
        admitted: AdmittedRequest | None = None
        try:
            while not self.acquiring.done():
                yield comment
                await asyncio.wait({self.acquiring}, timeout=self.interval_s)
            try:
                lease = self.acquiring.result()
            except EngineError as exc:
                for event in api.error_ending(self.target.shown(exc)):
                    yield event
                return
            admitted = self.target.admitted(lease, keep_alive_s=self.keep_alive_s, stall_timeout_s=self.stall_timeout_s)
            try:
                result = await call(admitted)
            except EngineError as exc:
                for event in api.error_ending(self.target.shown(exc)):
                    yield event
                return
            if not isinstance(result, StreamResult):  # vLLM refused the request: its error body as an event
                for event in api.refusal_ending(result.status_code, result.payload):
                    yield event
                return
            async for chunk in event_stream(admitted, result, api):
                yield chunk
        finally:
            if admitted is None:
                self.abandon()
            else:
                admitted.let_go(Holder.ROUTE)

    def abandon(self) -> None:
        """Leave the queue (the client went away while it waited), or end the lease nobody took."""
        self.state = Wait.ABANDONED
        if not self.acquiring.done():
            self.acquiring.cancel()
        elif not self.acquiring.cancelled() and self.acquiring.exception() is None:
            # The lease nobody took ends as every other does: its only holder, the route, lets go.
            nobodys = AdmittedRequest(manager=self.target.manager, lease=self.acquiring.result(), body=self.target.body)
            nobodys.let_go(Holder.ROUTE)


#: What the admission dependency gives a route: an admitted request, or a streaming one still waiting. Routes
#: declare it as ``Any``: Litestar hands a dependency's type to msgspec, which refuses a union of two dataclasses.
AdmittedOrWaiting = AdmittedRequest | WaitingRequest


async def provide_admission(
    request: Request[Any, Any, Any],
    manager: NamedDependency[EngineManager[ServingBundle]],
    api_settings: NamedDependency[ApiSettings],
) -> AsyncGenerator[AdmittedOrWaiting, None]:
    """Admit the request for its ``model`` for as long as its response lives; a stream may start waiting.

    A request that does not stream, or streams and is admitted within :data:`WAIT_NOTICE_AFTER_S`, is admitted
    here (an admission error is its HTTP status). A stream still waiting then gets a :class:`WaitingRequest`,
    whose SSE body owns the rest of the admission.
    """
    target = await admission_target(request, manager)
    timing = {
        "keep_alive_s": api_settings.sse_keep_alive_interval_s,
        "stall_timeout_s": api_settings.stream_stall_timeout_s,
    }
    if target.body.get("stream") is not True:
        # A client that leaves while its request waits for admission leaves the queue (and its body) at once.
        admitted = target.admitted(await unless_client_leaves(target.receive, manager.acquire(target.name)), **timing)
    else:
        acquiring = asyncio.ensure_future(manager.acquire(target.name))
        try:
            await asyncio.wait({acquiring}, timeout=WAIT_NOTICE_AFTER_S)
        except asyncio.CancelledError:
            acquiring.cancel()
            raise
        if not acquiring.done():
            waiting = WaitingRequest(
                target=target,
                acquiring=acquiring,
                shown_name=target.requested or target.name or manager.active_model or "the model",
                interval_s=api_settings.wait_notice_interval_s,
                keep_alive_s=api_settings.sse_keep_alive_interval_s,
                stall_timeout_s=api_settings.stream_stall_timeout_s,
            )
            # No cleanup here: Litestar runs it before the SSE body starts; the body's generator ends the wait.
            yield waiting
            return
        admitted = target.admitted(acquiring.result(), **timing)
    try:
        yield admitted
    finally:
        admitted.let_go(Holder.ROUTE)
