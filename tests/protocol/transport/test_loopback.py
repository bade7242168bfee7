"""QUIC and WebSocket on loopback with real mutual TLS: exchanges, rejections, closing."""

from __future__ import annotations

import asyncio

import pytest

from protocol.errors import CloseCode, ConnectionClosed
from protocol.events import Acked, Closed, MessageReceived
from protocol.messages import KubeEvent, ObjectRef, TwinDesired
from protocol.states import SessionState
from protocol.transport import (
    CertificateRejected,
    ConnectFailed,
    HandshakeTimeout,
    Link,
    SessionRejected,
    connect_quic,
    connect_websocket,
)
from tests.protocol.transport.conftest import TRANSPORTS, hello, welcome

REF = ObjectRef(kind="Pod", namespace="default", name="web", uid="uid-1")


def connect(transport: str):
    return connect_quic if transport == "quic" else connect_websocket


def event(text: str) -> KubeEvent:
    return KubeEvent(ref=REF, type="Normal", reason="Test", message=text, timestamp=1.0, count=1)


async def next_of(link: Link, kind: type, timeout: float = 10.0):
    async def find():
        async for ev in link:
            if isinstance(ev, kind):
                return ev
        raise AssertionError(f"link ended before a {kind.__name__}: {link.close_event}")

    return await asyncio.wait_for(find(), timeout)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_exchange_both_ways(transport, make_hub, pki_ca) -> None:
    received: asyncio.Queue = asyncio.Queue()

    async def behaviour(link: Link) -> None:
        link.accept(welcome(link))
        async for ev in link:
            if isinstance(ev, MessageReceived):
                await received.put(ev)
                await link.send(
                    TwinDesired(ref=REF, version=ev.seq, properties={"echo": ev.message.message})
                )

    hub = await make_hub(behaviour)
    link = await connect(transport)(
        "127.0.0.1",
        hub.port(transport),
        credentials=pki_ca.client,
        hello=hello(),
        server_name="localhost",
    )
    async with link:
        assert link.transport == transport
        assert link.welcome is not None and link.welcome.session_id == "test"
        (server,) = await hub.wait_links(1)
        assert server.transport == transport
        assert server.peer_node_name == "edge-1"
        assert server.hello.node_name == "edge-1"

        seqs = [await link.send(event(f"m{i}")) for i in range(5)]
        assert seqs == [1, 2, 3, 4, 5]
        for i in range(5):
            got = await asyncio.wait_for(received.get(), 10)
            assert (got.seq, got.message.message) == (i + 1, f"m{i}")
        echoes = []
        acked = 0
        while len(echoes) < 5 or acked < 5:
            ev = await asyncio.wait_for(link.__anext__(), 10)
            if isinstance(ev, MessageReceived):
                echoes.append(ev.message)
            elif isinstance(ev, Acked):
                acked = ev.up_to
        assert [m.properties["echo"] for m in echoes] == [f"m{i}" for i in range(5)]
        assert link.session.unacked() == []
    assert link.closed
    # The hub saw the orderly close.
    await asyncio.wait_for(server.wait_closed(), 10)
    assert isinstance(server.close_event, Closed) and server.close_event.by_peer


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("who", ["no_cert", "other_ca", "expired"])
async def test_bad_client_certificates_are_rejected(transport, who, make_hub, pki_ca) -> None:
    hub = await make_hub()
    with pytest.raises(ConnectFailed) as info:
        await connect(transport)(
            "127.0.0.1",
            hub.port(transport),
            credentials=getattr(pki_ca, who),
            hello=hello(),
            server_name="localhost",
            timeout=5.0,
        )
    assert not isinstance(info.value, (SessionRejected, HandshakeTimeout)), info.value
    assert "certificate" in str(info.value)  # the message says why
    # Typed, so that a dialer knows another transport will not help.
    assert isinstance(info.value, CertificateRejected), repr(info.value)
    if transport == "quic":  # the hub's alert and reason come through
        assert info.value.alert in ("bad_certificate", "certificate_required")
        assert info.value.reason
    assert hub.links == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_verifies_the_hub_name(transport, make_hub, pki_ca) -> None:
    hub = await make_hub()
    with pytest.raises(ConnectFailed) as info:
        await connect(transport)(
            "127.0.0.1",
            hub.port(transport),
            credentials=pki_ca.client,
            hello=hello(),
            server_name="not-the-hub.example",
            timeout=5.0,
        )
    assert not isinstance(info.value, HandshakeTimeout)
    assert hub.links == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_hub_refusal_is_session_rejected(transport, make_hub, pki_ca) -> None:
    async def behaviour(link: Link) -> None:
        link.reject(CloseCode.UNAUTHORIZED, "node edge-1 is cordoned off")
        await link.wait_closed()

    hub = await make_hub(behaviour)
    with pytest.raises(SessionRejected) as info:
        await connect(transport)(
            "127.0.0.1",
            hub.port(transport),
            credentials=pki_ca.client,
            hello=hello(),
            server_name="localhost",
        )
    assert info.value.code == CloseCode.UNAUTHORIZED
    assert "cordoned" in info.value.reason


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_version_mismatch(transport, make_hub, pki_ca) -> None:
    hub = await make_hub()
    with pytest.raises(SessionRejected) as info:
        await connect(transport)(
            "127.0.0.1",
            hub.port(transport),
            credentials=pki_ca.client,
            hello=hello(min_version=99),
            server_name="localhost",
        )
    assert info.value.code == CloseCode.VERSION_MISMATCH


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_hub_closing_ends_the_link(transport, make_hub, pki_ca) -> None:
    async def behaviour(link: Link) -> None:
        link.accept(welcome(link))
        await link.close(CloseCode.GOING_AWAY, "hub restarting")

    hub = await make_hub(behaviour)
    link = await connect(transport)(
        "127.0.0.1",
        hub.port(transport),
        credentials=pki_ca.client,
        hello=hello(),
        server_name="localhost",
    )
    closed = await next_of(link, Closed)
    assert (closed.code, closed.reason, closed.by_peer) == (
        CloseCode.GOING_AWAY,
        "hub restarting",
        True,
    )
    with pytest.raises(ConnectionClosed):
        await link.send(event("too late"))
    await asyncio.wait_for(link.close(), link.close_bound)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_send_while_closing_raises_connection_closed(transport, make_hub, pki_ca) -> None:
    # An agent whose store failed closes its link while its outbox drain is sending: the
    # send between our close and the peer's must be ConnectionClosed (as documented), not
    # the session's StateError (logged as a traceback by the agent's drain).
    async def behaviour(link: Link) -> None:
        link.accept(welcome(link))
        await link.wait_closed()

    hub = await make_hub(behaviour)
    link = await connect(transport)(
        "127.0.0.1",
        hub.port(transport),
        credentials=pki_ca.client,
        hello=hello(),
        server_name="localhost",
    )
    closing = asyncio.create_task(link.close(CloseCode.GOING_AWAY, "edge outbox failure"))
    await asyncio.sleep(0)  # one step: close() has sent its close and awaits the peer's
    assert link.session.state is SessionState.CLOSING
    with pytest.raises(ConnectionClosed):
        await link.send(event("while closing"))
    await asyncio.wait_for(closing, link.close_bound)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_nothing_listening(transport, pki_ca) -> None:
    # A port nobody listens on: WebSocket is refused at once; QUIC hears nothing (the
    # ICMP port-unreachable is not an answer QUIC trusts) and times out.
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ConnectFailed):
        await connect(transport)(
            "127.0.0.1",
            port,
            credentials=pki_ca.client,
            hello=hello(),
            server_name="localhost",
            timeout=1.0,
        )
    assert loop.time() - started < 3.0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_server_shutdown_closes_links_going_away(transport, pki_ca) -> None:
    from protocol.transport import serve_quic, serve_websocket

    async def handler(link: Link) -> None:
        link.accept(welcome(link))
        async for _ in link:
            pass

    serve = serve_quic if transport == "quic" else serve_websocket
    server = await serve(handler, "127.0.0.1", 0, credentials=pki_ca.server)
    try:
        link = await connect(transport)(
            "127.0.0.1",
            server.port,
            credentials=pki_ca.client,
            hello=hello(),
            server_name="localhost",
        )
    finally:
        await asyncio.wait_for(server.aclose(), 10)
    closed = await next_of(link, Closed)
    assert (closed.code, closed.reason, closed.by_peer) == (
        CloseCode.GOING_AWAY,
        "hub shutting down",
        True,
    )
    await link.close()
