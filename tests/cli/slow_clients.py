"""Slow HTTP clients for the connection-limit tests: raw connections that never finish their request's headers or
body, and a raw keep-alive client whose requests provably share one connection. 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

__all__ = ["KeepAliveClient", "SlowBodies", "SlowLoris", "answer_of"]


class SlowLoris:
    """Raw connections that each sent half a request line and then trickle a byte every ``every_s``."""

    def __init__(self, url: str, every_s: float = 0.3, line: bytes = b"GET /heal") -> None:
        self._port = int(url.rsplit(":", 1)[1])
        self._every_s, self._line = every_s, line
        self.connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self, count: int) -> None:
        for _ in range(count):
            reader, writer = await asyncio.open_connection("127.0.0.1", self._port)
            writer.write(self._line)
            self.connections.append((reader, writer))
            self._tasks.append(asyncio.create_task(self._trickle(writer)))

    async def _trickle(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while not writer.is_closing():
                await asyncio.sleep(self._every_s)
                writer.write(b"l" if self._line.startswith(b"GET") else b"\r\n")
                await writer.drain()

    async def closed_by_server(self, within_s: float) -> list[bool]:
        """Whether each connection saw the server close it (EOF or a reset) within ``within_s``."""

        async def eof(reader: asyncio.StreamReader) -> bool:
            try:
                return await asyncio.wait_for(reader.read(), within_s) == b""
            except ConnectionError:
                return True
            except TimeoutError:
                return False

        return list(await asyncio.gather(*(eof(reader) for reader, _ in self.connections)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for _, writer in self.connections:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


class SlowBodies(SlowLoris):
    """Raw connections that each sent a POST's headers and a little of its body, then trickle a body byte every
    ``every_s`` (a slow POST)."""

    def __init__(self, url: str, every_s: float = 0.3, path: str = "/upload", length: int = 1_000_000) -> None:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n\r\n"
        )
        super().__init__(url, every_s, line=head.encode() + b'{"model": "')

    async def _trickle(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while not writer.is_closing():
                await asyncio.sleep(self._every_s)
                writer.write(b"x")
                await writer.drain()

    async def answers(self, within_s: float) -> list[bytes]:
        """What each connection got before the server closed it within ``within_s`` (b"" for nothing; a
        connection still open fails the test)."""

        async def rest(reader: asyncio.StreamReader) -> bytes:
            try:
                return await asyncio.wait_for(reader.read(), within_s)
            except ConnectionError:
                return b""

        return list(await asyncio.gather(*(rest(reader) for reader, _ in self.connections)))


def answer_of(raw: bytes) -> tuple[int, Any]:
    """The status and JSON body of one raw HTTP/1.1 answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


class KeepAliveClient:
    """One raw HTTP/1.1 connection that sends its requests one after another (a served keep-alive client)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def connect(cls, url: str) -> KeepAliveClient:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def get(self, path: str, timeout_s: float = 30.0) -> tuple[int, bytes]:
        """GET ``path`` on this connection: the status and body (the connection must still be open)."""
        self._writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await self._writer.drain()
        async with asyncio.timeout(timeout_s):
            head = await self._reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
            return int(lines[0].split()[1]), await self._reader.readexactly(length)

    async def closed_by_server(self, within_s: float) -> bool:
        """Whether the server closes this (idle) connection within ``within_s``."""
        try:
            return await asyncio.wait_for(self._reader.read(), within_s) == b""
        except ConnectionError:
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()
