"""protocol.transport.leantls: TLS servers built with ``server_protocol`` carry every byte,
in order, both ways (the shared read buffer and the list write backlog), over real TLS."""

from __future__ import annotations

import asyncio
import hashlib

from protocol.transport.leantls import TLS_READ_BUFFER, server_protocol
from protocol.transport.tls import client_ssl_context, server_ssl_context
from tests.testpki import TestPKI

#: Sizes of the writes each side makes: empty, tiny, around and past one TLS record.
SIZES = [0, 1, 7, 100, TLS_READ_BUFFER - 1, TLS_READ_BUFFER, TLS_READ_BUFFER + 1, 70_000, 3]


def _payload(seed: int) -> list[bytes]:
    return [
        hashlib.sha256(f"{seed}-{i}".encode()).digest() * (n // 32 + 1)
        for i, n in enumerate(SIZES * 5)
    ]


class _Echo(asyncio.Protocol):
    """Answers every byte it gets, and opens with its own burst of writes; ``done`` gets
    everything received once the connection is lost."""

    def __init__(self, done: asyncio.Future[bytes]) -> None:
        self.received = bytearray()
        self.done = done
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        for chunk in _payload(1):  # before any byte from the client
            transport.write(chunk)

    def data_received(self, data: bytes) -> None:
        self.received += data
        assert self.transport is not None
        self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(bytes(self.received))


async def test_server_protocol_carries_bursts_of_writes_both_ways(pki_ca: TestPKI) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()
    context = server_ssl_context(pki_ca.server)
    server = await loop.create_server(
        lambda: server_protocol(_Echo(done), context, handshake_timeout=10),
        "127.0.0.1",
        0,
    )
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl_context(pki_ca.client), server_hostname="localhost"
        )
        greeting = b"".join(_payload(1))
        assert await reader.readexactly(len(greeting)) == greeting
        sent = _payload(2)
        for chunk in sent:
            writer.write(chunk)
        await writer.drain()
        echoed = await reader.readexactly(sum(map(len, sent)))
        assert echoed == b"".join(sent)
        writer.close()
        await writer.wait_closed()
        assert await asyncio.wait_for(done, 10) == b"".join(sent)
    finally:
        server.close()
        await server.wait_closed()
