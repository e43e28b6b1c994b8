"""The Responses API's tool server (vLLM's ``--tool-server``), opened once per process and shared by every model.

`vllm serve` opens one `ToolServer` at start-up and hands it to its Responses serving
object; the Responses API then offers its tools (MCP servers' tools, or the ``demo`` browser and Python tools) to
harmony models (gpt-oss) and runs them. Turnout does the same for every generate model's bundle: the first bundle
built with a spec opens it, later bundles (other models, reloads, switches back) get the same object, since a tool
server belongs to the process, not to one engine.
"""

from __future__ import annotations

import asyncio

from vllm.entrypoints.mcp.tool_server import DemoToolServer, MCPToolServer, ToolServer

from server.frontend.settings import FrontendConfigError

__all__ = ["open_tool_server"]

_opened: dict[str, ToolServer | None] = {}
_lock = asyncio.Lock()


async def open_tool_server(spec: str | None) -> ToolServer | None:
    """The tool server ``spec`` names (``host:port,...`` of MCP servers, or ``demo``), opened on first use.

    Raises:
        FrontendConfigError: The tool server cannot be opened (an MCP server that does not answer, ``mcp`` or
            the demo tools' packages missing), with vLLM's reason.
    """
    if not spec:
        return None
    async with _lock:
        if spec not in _opened:
            try:
                _opened[spec] = await _open(spec)
            except Exception as exc:  # MCP's client raises anything (an ExceptionGroup, OSError, ...)
                raise FrontendConfigError(f"tool_server {spec!r} cannot be opened: {_reason(exc)}") from exc
        return _opened[spec]


async def _open(spec: str) -> ToolServer:
    # What vLLM 0.32's ``init_tool_server`` does (0.26 to 0.31 open it inline in their api_server instead), with
    # the two tool server classes every supported vLLM has.
    if spec == "demo":
        demo = DemoToolServer()  # type: ignore[no-untyped-call]
        await demo.init_and_validate()  # type: ignore[no-untyped-call]
        return demo
    mcp = MCPToolServer()  # type: ignore[no-untyped-call]
    await mcp.add_tool_server(spec)
    return mcp


def _reason(exc: BaseException) -> str:
    # anyio's task groups wrap the one real failure (connection refused, ...) in an ExceptionGroup.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
