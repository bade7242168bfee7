"""The WebSocket adapter on the wire, seen from a plain websockets client (real mutual TLS).

Whole frames only, one or more per binary message, batched per event-loop iteration and
capped at BATCH_BYTES; a text message, a message over the size limit, a wrong path and a
client that never upgrades each end the connection, and a refused upgrade is a clear
ConnectFailed; a reader that stops reading holds the hub's sends back instead of
making it buffer without bound, and loses nothing.
"""

from __future__ import annotations

import asyncio
import ssl

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from protocol.codec import FrameDecoder, encode
from protocol.errors import CloseCode
from protocol.events import Closed, MessageReceived
from protocol.messages import KubeEvent, ObjectRef, ObjectUpsert, Ping, Pong, Welcome
from protocol.transport import (
    ConnectFailed,
    HandshakeTimeout,
    Link,
    client_ssl_context,
    connect_websocket,
    serve_websocket,
    server_ssl_context,
)
from protocol.transport.websocket import BATCH_BYTES, PATH
from tests.protocol.transport.conftest import hello, welcome
from tests.waiting import eventually

REF = ObjectRef(kind="Pod", namespace="default", name="web", uid="uid-1")


def upsert(i: int, size: int = 100) -> ObjectUpsert:
    return ObjectUpsert(REF, str(i), {"data": "x" * size})


def event(i: int) -> KubeEvent:
    return KubeEvent(ref=REF, type="Normal", reason="Test", message=str(i), timestamp=0.0)


class RawClient:
    """A websockets client that speaks the session by hand: frames in, frames out."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.decoder = FrameDecoder()
        self.messages: list[int] = []  # size of every binary message received
        self.backlog: list = []  # frames that came with the welcome

    async def frames(self, timeout: float = 10.0) -> list:
        """The frames of the next binary message."""
        if self.backlog:
            got, self.backlog = self.backlog, []
            return got
        data = await asyncio.wait_for(self.ws.recv(), timeout)
        assert isinstance(data, bytes)
        self.messages.append(len(data))
        self.decoder.feed(data)
        got = list(self.decoder)
        assert self.decoder.buffered == 0, "a frame spans two WebSocket messages"
        return got

    async def open_session(self) -> Welcome:
        await self.ws.send(encode(hello()))
        (_, welcome_), *self.backlog = await self.frames()
        assert isinstance(welcome_, Welcome)
        return welcome_


@pytest.fixture
async def hub(pki_ca):
    """A WebSocket server whose handler is set per test (``hub.behaviour``)."""

    class Hub:
        behaviour = None
        links: list[Link] = []
        done: asyncio.Event = asyncio.Event()

    state = Hub()
    state.links = []
    state.done = asyncio.Event()

    async def handler(link: Link) -> None:
        state.links.append(link)
        link.accept(welcome(link))
        try:
            await state.behaviour(link)
        finally:
            state.done.set()

    server = await serve_websocket(
        handler, "127.0.0.1", 0, credentials=pki_ca.server, hello_timeout=2.0
    )
    state.port = server.port
    yield state
    await server.aclose()


def raw_connect(pki_ca, port: int, path: str = PATH, **kwargs):
    return ws_connect(
        f"wss://127.0.0.1:{port}{path}",
        ssl=client_ssl_context(pki_ca.client),
        server_hostname="localhost",
        ping_interval=None,
        compression=None,
        max_size=None,
        **kwargs,
    )


async def test_a_burst_of_sends_leaves_in_few_messages_of_whole_frames(hub, pki_ca) -> None:
    count = 300

    async def behaviour(link: Link) -> None:
        for i in range(count):  # one go, no await that yields: one loop iteration
            await link.send(upsert(i))
        await link.wait_closed()

    hub.behaviour = behaviour
    async with raw_connect(pki_ca, hub.port) as ws:
        client = RawClient(ws)
        await client.open_session()
        got = []
        while len(got) < count:
            got += [m.resource_version for _, m in await client.frames()]
    assert got == [str(i) for i in range(count)]  # all, in order, none split
    # the welcome and 300 frames of ~170 bytes (51 KiB) in one iteration: one message
    assert len(client.messages) <= 2, client.messages
    assert max(client.messages) <= BATCH_BYTES


async def test_messages_are_capped_and_a_larger_frame_goes_alone(hub, pki_ca) -> None:
    async def behaviour(link: Link) -> None:
        for i in range(40):
            await link.send(upsert(i, size=4000))  # 40 x ~4 KiB: over one batch
        await link.send(upsert(99, size=BATCH_BYTES + 1000))  # bigger than a batch
        await link.wait_closed()

    hub.behaviour = behaviour
    async with raw_connect(pki_ca, hub.port) as ws:
        client = RawClient(ws)
        await client.open_session()
        got = []
        while len(got) < 41:
            got += [m for _, m in await client.frames()]
    sizes = client.messages
    assert len(sizes) >= 3  # split at the cap, and the big frame alone
    big = len(encode(upsert(99, size=BATCH_BYTES + 1000)))
    assert sizes[-1] == big
    assert all(size <= BATCH_BYTES for size in sizes[:-1])
    assert [m.resource_version for m in got] == [*map(str, range(40)), "99"]


async def test_several_frames_in_one_message_are_all_delivered(hub, pki_ca) -> None:
    received: list = []

    async def behaviour(link: Link) -> None:
        async for ev in link:
            if isinstance(ev, MessageReceived):
                received.append(ev.seq)
                if len(received) == 3:
                    return

    hub.behaviour = behaviour
    async with raw_connect(pki_ca, hub.port) as ws:
        await RawClient(ws).open_session()
        await ws.send(b"".join(encode(event(i), i) for i in (1, 2, 3)))
        await asyncio.wait_for(hub.done.wait(), 10)
    assert received == [1, 2, 3]


async def test_a_text_message_ends_the_connection(hub, pki_ca) -> None:
    async def behaviour(link: Link) -> None:
        async for _ in link:
            pass

    hub.behaviour = behaviour
    async with raw_connect(pki_ca, hub.port) as ws:
        await RawClient(ws).open_session()
        await ws.send("hello as text")
        with pytest.raises(ConnectionClosed) as info:
            await asyncio.wait_for(ws.recv(), 10)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1003
    await asyncio.wait_for(hub.done.wait(), 10)
    [link] = hub.links
    closed = link.close_event
    assert isinstance(closed, Closed) and closed.code is CloseCode.CONNECTION_LOST


async def test_a_wrong_path_gets_404(hub, pki_ca) -> None:
    with pytest.raises(InvalidStatus) as info:
        async with raw_connect(pki_ca, hub.port, path="/elsewhere"):
            pass
    assert info.value.response.status_code == 404
    assert hub.links == []


async def test_a_client_that_never_upgrades_is_dropped(hub, pki_ca) -> None:
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1",
        hub.port,
        ssl=client_ssl_context(pki_ca.client),
        server_hostname="localhost",
    )
    started = loop.time()
    try:
        # TLS is up; no HTTP request follows. The hub drops us after hello_timeout (2 s).
        data = await asyncio.wait_for(reader.read(), 10)
    except (ConnectionError, ssl.SSLError):
        data = b""
    finally:
        writer.close()
    assert data == b""
    assert 1.5 <= loop.time() - started <= 9.0
    assert hub.links == []


async def test_a_reader_that_stops_holds_sends_back_and_loses_nothing(hub, pki_ca) -> None:
    size, total = 16 * 1024, 2048  # 32 MiB in all, far more than socket buffers hold
    sent = 0

    async def behaviour(link: Link) -> None:
        nonlocal sent
        for i in range(total):
            await link.send(upsert(i, size=size))
            sent += 1
        await link.wait_closed()

    hub.behaviour = behaviour
    async with raw_connect(pki_ca, hub.port, max_queue=1) as ws:
        client = RawClient(ws)
        await client.open_session()
        # Read nothing: TCP buffers fill, then the hub's sends must wait (no progress).
        loop = asyncio.get_running_loop()
        last, still_since = -1, loop.time()

        def stalled() -> bool:  # no send went through for a second
            nonlocal last, still_since
            if sent != last:
                last, still_since = sent, loop.time()
            return loop.time() - still_since >= 1.0

        await eventually(stalled, "the sends to stop", 30, interval=0.1, state=lambda: sent)
        assert sent < total // 2, f"{sent} sends went through a stalled reader"
        got = []
        while len(got) < total:
            got += [int(m.resource_version) for _, m in await client.frames()]
    assert got == list(range(total))


async def test_a_message_over_the_size_limit_closes_with_1009(hub, pki_ca) -> None:
    async def behaviour(link: Link) -> None:
        async for _ in link:
            pass

    hub.behaviour = behaviour
    async with raw_connect(pki_ca, hub.port) as ws:
        await RawClient(ws).open_session()
        await ws.send(b"\x00" * (5 * 1024 * 1024))  # over max(4 MiB + 4, 64 KiB)
        with pytest.raises(ConnectionClosed) as info:
            await asyncio.wait_for(ws.recv(), 10)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    await asyncio.wait_for(hub.done.wait(), 10)
    assert hub.links[0].close_event.code is CloseCode.CONNECTION_LOST


async def test_an_upgrade_refused_by_the_server_is_connect_failed(pki_ca) -> None:
    async def not_a_hub(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(
        not_a_hub, "127.0.0.1", 0, ssl=server_ssl_context(pki_ca.server)
    )
    try:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(ConnectFailed) as info:
            await connect_websocket(
                "127.0.0.1",
                port,
                credentials=pki_ca.client,
                hello=hello(),
                server_name="localhost",
                timeout=10.0,
            )
        assert not isinstance(info.value, HandshakeTimeout)
        assert "404" in str(info.value)
    finally:
        server.close()
        await server.wait_closed()


async def test_a_peer_that_floods_pings_and_never_reads_is_not_buffered_without_bound(
    hub, pki_ca
) -> None:
    """Every ping makes a pong: a peer that sends pings and reads nothing must be held back
    (the hub stops reading while its writes are paused), not make the hub buffer pongs
    for as long as it keeps sending."""

    async def behaviour(link: Link) -> None:
        async for _ in link:
            pass

    hub.behaviour = behaviour
    ws = ClientProtocol(parse_uri(f"wss://localhost:{hub.port}{PATH}"), max_size=None)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", hub.port, ssl=client_ssl_context(pki_ca.client), server_hostname="localhost"
    )
    try:
        ws.send_request(ws.connect())
        writer.write(b"".join(ws.data_to_send()))
        while ws.state is not State.OPEN:
            ws.receive_data(await asyncio.wait_for(reader.read(65536), 10))
        ws.send_binary(encode(hello()))
        writer.write(b"".join(ws.data_to_send()))
        while not any(isinstance(m, Welcome) for m in _frames_of(ws)):
            ws.receive_data(await asyncio.wait_for(reader.read(65536), 10))
        batch = b"".join(encode(Ping(nonce=i)) for i in range(4000))  # ~40 KB of pings
        limit = 64 * 1024 * 1024  # far more than every buffer between us holds
        sent = 0
        while sent < limit:
            ws.send_binary(batch)
            writer.write(b"".join(ws.data_to_send()))
            sent += len(batch)
            try:
                await asyncio.wait_for(writer.drain(), 3.0)
            except asyncio.TimeoutError:
                break  # held back: the hub stopped reading
        assert sent < limit, f"the hub read {sent} bytes of pings from a peer reading nothing"
        # Reading again releases it: the pongs come and the session is still open.
        pongs = 0
        while pongs < 100:
            ws.receive_data(await asyncio.wait_for(reader.read(65536), 10))
            pongs += sum(isinstance(m, Pong) for m in _frames_of(ws))
        assert hub.links[0].close_event is None
    finally:
        writer.close()


def _frames_of(ws: ClientProtocol) -> list:
    decoder = FrameDecoder()
    for event in ws.events_received():
        if isinstance(event, Frame) and event.opcode is Opcode.BINARY:
            decoder.feed(event.data)
    return [m for _, m in decoder]
