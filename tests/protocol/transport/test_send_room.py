"""``Link.wait_room``: a bulk sender waits until the transport took what it queued, on
real QUIC and WebSocket links over loopback."""

from __future__ import annotations

import asyncio

import pytest

from protocol.stream_messages import MAX_STREAM_CHUNK, StreamData
from protocol.transport import connect_quic, connect_websocket
from tests.protocol.transport.conftest import TRANSPORTS, hello


def connect(transport: str):
    return connect_quic if transport == "quic" else connect_websocket


async def _dial(transport: str, hub, pki_ca):
    return await connect(transport)(
        "127.0.0.1",
        hub.port(transport),
        credentials=pki_ca.client,
        hello=hello(),
        server_name="localhost",
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_bulk_sender_waits_until_the_transport_took_its_queue(
    transport, make_hub, pki_ca
) -> None:
    hub = await make_hub()
    link = await _dial(transport, hub, pki_ca)
    async with link:
        chunk = b"z" * MAX_STREAM_CHUNK
        for _ in range(64):  # 1 MiB in one loop turn: more than the transport takes at once
            await link.send(StreamData(stream_id=7, channel=1, data=chunk))
        assert link.session.bytes_to_send > 256 * 1024
        waiting = asyncio.ensure_future(link.wait_room(64 * 1024))
        await asyncio.sleep(0)
        assert not waiting.done()
        await asyncio.wait_for(waiting, 20)
        assert link.session.bytes_to_send <= 64 * 1024
        await link.wait_room(64 * 1024)  # room already: at once


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_waiting_sender_is_released_when_the_link_ends(transport, make_hub, pki_ca) -> None:
    hub = await make_hub()
    link = await _dial(transport, hub, pki_ca)
    chunk = b"z" * MAX_STREAM_CHUNK
    for _ in range(64):
        await link.send(StreamData(stream_id=7, channel=1, data=chunk))
    waiting = asyncio.ensure_future(link.wait_room(0))
    await asyncio.sleep(0)
    link.connection_lost("cut")  # the transport is gone: nothing will be taken
    await asyncio.wait_for(waiting, 10)
    await link.close()
