"""How an admitted request's answer leaves the server: a JSON body or an SSE stream, one path for every route.

Public names, by the module that owns them: :func:`answer` and :func:`respond`, and the :class:`BundleCall` a route
asks of its bundle (``delivery.py``: the one module a response or stream leaves through, its lease held to the
last event); the admission dependency that lets a stream wait for its model with SSE comments
(``waiting.py``: :func:`provide_admission`). Behind them: the stall timer that ends a stream whose client stopped
reading (``stall_timer.py``) and the cancellation of a request whose client left (``disconnects.py``). It builds on
admission and the error shapes; the controllers call it.
"""

from server.api.streaming.delivery import BundleCall, answer, respond
from server.api.streaming.waiting import provide_admission

__all__ = ["BundleCall", "answer", "provide_admission", "respond"]
