"""The demo's relay: forwards UDP and TCP; cut, it drops datagrams and holds TCP without
closing anything; restored, everything flows again (bytes held during the cut included)."""

from __future__ import annotations

import asyncio

from cloudhub.demo.relay import Relay
from cloudhub.devtools.fleet import free_port


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):  # type: ignore[override]
        self.transport = transport

    def datagram_received(self, data, addr):  # type: ignore[override]
        self.transport.sendto(data, addr)


class _Client(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data, addr):  # type: ignore[override]
        self.queue.put_nowait(data)


async def _tcp_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_relay_forwards_cuts_and_restores() -> None:
    loop = asyncio.get_running_loop()
    target = free_port()
    udp_server, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", target))
    tcp_server = await asyncio.start_server(_tcp_echo, "127.0.0.1", target)
    relay = Relay(target, free_port())
    await relay.start()
    udp, client = await loop.create_datagram_endpoint(
        _Client, remote_addr=("127.0.0.1", relay.port)
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    try:
        udp.sendto(b"one")
        assert await asyncio.wait_for(client.queue.get(), 10) == b"one"
        writer.write(b"abc")
        assert await asyncio.wait_for(reader.readexactly(3), 10) == b"abc"

        relay.cut()
        udp.sendto(b"lost")
        writer.write(b"held")
        await writer.drain()
        # Nothing arrives and nothing is closed while cut (0.5 s is the observation window,
        # not a synchronisation: the assertion is that nothing happens in it).
        read = asyncio.ensure_future(reader.read(10))
        done, _ = await asyncio.wait({read}, timeout=0.5)
        assert not done and client.queue.empty()
        assert relay.dropped_datagrams >= 1
        assert not writer.is_closing()
        # A connection made during the cut is accepted and held.
        late_reader, late_writer = await asyncio.open_connection("127.0.0.1", relay.port)
        late_writer.write(b"late")

        relay.restore()
        assert await asyncio.wait_for(read, 10) == b"held"  # held, not dropped
        assert await asyncio.wait_for(late_reader.readexactly(4), 10) == b"late"
        udp.sendto(b"two")
        assert await asyncio.wait_for(client.queue.get(), 10) == b"two"  # b"lost" is gone
        assert relay.up_bytes >= len(b"one" + b"abc" + b"held" + b"late" + b"two")
        late_writer.close()
    finally:
        writer.close()
        udp.close()
        await relay.aclose()
        udp_server.close()
        tcp_server.close()
        await tcp_server.wait_closed()
