"""The bare libraries, for comparison: an aioquic stream echo and a websockets echo.

Both with TLS 1.3 and the same certificates as our transports; both through the libraries'
own asyncio APIs (aioquic's ``QuicConnectionProtocol`` streams, websockets' ``serve`` /
``connect``), which is what an application using the library directly would write.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

from aioquic.asyncio import QuicConnectionProtocol
from aioquic.asyncio import connect as quic_connect
from aioquic.asyncio import serve as quic_serve
from aioquic.quic.configuration import QuicConfiguration
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import serve as ws_serve

from protocol.transport.tls import TLSCredentials

ALPN = "bare-echo"


async def serve_bare_quic(host: str, credentials: TLSCredentials):
    """An aioquic server echoing every stream back; returns (server, port)."""
    config = QuicConfiguration(is_client=False, alpn_protocols=[ALPN])
    config.certificate = credentials.chain[0]
    config.private_key = credentials.private_key

    def stream_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def echo() -> None:
            while data := await reader.read(65536):
                writer.write(data)

        asyncio.get_running_loop().create_task(echo())

    server = await quic_serve(host, 0, configuration=config, stream_handler=stream_handler)
    return server, server._transport.get_extra_info("sockname")[1]


async def serve_bare_websocket(host: str, context: ssl.SSLContext):
    """A websockets server echoing every message; returns (server, port)."""

    async def echo(ws) -> None:
        async for message in ws:
            await ws.send(message)

    server = await ws_serve(echo, host, 0, ssl=context, ping_interval=None, compression=None)
    return server, server.sockets[0].getsockname()[1]


Roundtrip = Callable[[bytes], Awaitable[None]]


class BareQuicClient:
    """One aioquic stream to the echo server: send bytes, read the same number back."""

    async def __aenter__(self) -> BareQuicClient:
        return self

    def __init__(self, host: str, port: int, credentials: TLSCredentials) -> None:
        self._host, self._port, self._credentials = host, port, credentials

    async def open(self) -> None:
        config = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], server_name="localhost")
        config.cadata = self._credentials.ca_pem
        self._cm = quic_connect(self._host, self._port, configuration=config)
        self._client: QuicConnectionProtocol = await self._cm.__aenter__()
        self.reader, self.writer = await self._client.create_stream()

    async def close(self) -> None:
        await self._cm.__aexit__(None, None, None)


class BareWebSocketClient:
    """One websockets connection to the echo server."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        self._uri = f"wss://{host}:{port}/"
        self._context = context

    async def open(self) -> None:
        self.ws = await ws_connect(
            self._uri,
            ssl=self._context,
            server_hostname="localhost",
            ping_interval=None,
            compression=None,
        )

    async def close(self) -> None:
        await self.ws.close()
