"""The request id in the log lines a request causes (``--log-format json``), and the same id in ``X-Request-Id``."""

from __future__ import annotations

from typing import Any

from server.api.edge.request_id import add_request_id_header, request_id_in_logs
from server.profiles import REQUEST_ID


async def _run(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, list[Any]]:
    seen: list[str | None] = []
    sent: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(REQUEST_ID.get())  # what a log record made while serving the request reads
        message = {"type": "http.response.start", "status": 200, "headers": []}
        await add_request_id_header(message, scope)  # type: ignore[arg-type]
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        return None

    scope = {"type": "http", "headers": headers}
    await request_id_in_logs(app)(scope, receive, send)  # type: ignore[arg-type]
    assert REQUEST_ID.get() is None  # reset once the request is served
    return seen[0], sent


async def test_a_request_s_own_id_is_in_its_log_lines() -> None:
    seen, _ = await _run([(b"x-request-id", b"abc-1")])
    assert seen == "abc-1"


async def test_a_new_id_is_in_the_log_lines_and_the_header_alike() -> None:
    seen, sent = await _run([])
    assert seen is not None and len(seen) == 32
    assert (b"x-request-id", seen.encode()) in [(name.lower(), value) for name, value in sent[0]["headers"]]
