"""The test relay itself (tests/slowlink.py): TCP through it loses no byte whatever its
``loss`` (on TCP loss can only be delay), UDP loses about that fraction, and both are paced
at the link's rate."""

from __future__ import annotations

import asyncio
import os

from tests.slowlink import SlowLink

KIB = 1024


async def test_tcp_through_a_lossy_relay_arrives_whole_and_in_order() -> None:
    """64 KiB each way through a 50 % "lossy" relay: every byte arrives, in order, both
    directions, and no TCP byte is counted as dropped."""
    payload = os.urandom(64 * KIB)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(len(payload)))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with SlowLink(port, rate=256 * KIB, loss=0.5) as relay:
            reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
            loop = asyncio.get_running_loop()
            started = loop.time()
            writer.write(payload)
            await writer.drain()
            back = await asyncio.wait_for(reader.readexactly(len(payload)), 20)
            took = loop.time() - started
            writer.close()
            await writer.wait_closed()
            assert back == payload
            assert relay.sent("up") == relay.sent("down") == len(payload)
            assert relay.dropped == 0 and relay.tcp_connections == 1
            # Paced: 64 KiB each way at 256 KiB/s is at least 0.25 s per direction.
            assert took >= 0.45, f"{took:.2f} s: the relay did not pace the link"
    finally:
        server.close()
        await server.wait_closed()


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.transport.sendto(data, addr)  # type: ignore[attr-defined]


class _Client(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.changed = asyncio.Event()

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.got.append(data)
        self.changed.set()


async def test_udp_through_a_lossy_relay_loses_about_its_loss_fraction() -> None:
    """200 datagrams through a 20 % loss relay (each way): about 36 % of round trips are
    lost (1 - 0.8²), counted in ``dropped``; what arrives is what was sent."""
    loop = asyncio.get_running_loop()
    target, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
    port = target.get_extra_info("sockname")[1]
    try:
        async with SlowLink(port, rate=1024 * KIB, loss=0.2, seed=7) as relay:
            client = _Client()
            transport, _ = await loop.create_datagram_endpoint(
                lambda: client, remote_addr=("127.0.0.1", relay.port)
            )
            sent = [i.to_bytes(2, "big") * 50 for i in range(200)]
            for datagram in sent:
                transport.sendto(datagram)

            async def settled() -> None:
                # Everything not dropped comes back: wait until the counts add up.
                while len(client.got) + relay.dropped < len(sent):
                    client.changed.clear()
                    await client.changed.wait()

            try:
                await asyncio.wait_for(settled(), 10)
            finally:
                transport.close()
            assert set(client.got) <= set(sent)
            assert 0.2 < 1 - len(client.got) / len(sent) < 0.55
    finally:
        target.close()
