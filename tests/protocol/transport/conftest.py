"""Fixtures for the transport tests: a session-scoped test PKI and in-process servers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from protocol.config import SessionConfig
from protocol.messages import PROTOCOL_VERSION, Hello, Welcome
from protocol.transport import Link, serve_quic, serve_websocket
from tests.testpki import TestPKI

TRANSPORTS = ("quic", "websocket")


def hello(node: str = "edge-1", *, min_version: int = PROTOCOL_VERSION) -> Hello:
    return Hello(
        min_version=min_version,
        max_version=max(min_version, PROTOCOL_VERSION),
        node_name=node,
        agent_version="test",
    )


def welcome(link: Link) -> Welcome:
    return Welcome(
        version=link.version,
        hub_time=time.time(),
        session_id="test",
        received_up_to=0,
        heartbeat_interval=link.session.config.ping_interval,
    )


@dataclass
class Hub:
    """In-process QUIC and WebSocket servers sharing one handler."""

    quic_port: int
    websocket_port: int
    links: list[Link] = field(default_factory=list)
    """Every link handed to the handler, in order."""
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    def port(self, transport: str) -> int:
        return self.quic_port if transport == "quic" else self.websocket_port

    async def wait_links(self, n: int, timeout: float = 10.0) -> list[Link]:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.links) >= n), timeout)
        return self.links


Behaviour = Callable[[Link], "asyncio.Future[None] | object"]


@pytest.fixture
async def make_hub(pki_ca: TestPKI) -> AsyncIterator[Callable[..., object]]:
    """Start a hub whose handler runs ``behaviour(link)`` (default: accept, then drain)."""
    servers = []

    async def start(
        behaviour=None, config: SessionConfig | None = None, *, loopback_datagram_size: int = 8192
    ) -> Hub:
        hub: Hub | None = None

        async def handler(link: Link) -> None:
            assert hub is not None
            async with hub.arrived:
                hub.links.append(link)
                hub.arrived.notify_all()
            if behaviour is not None:
                await behaviour(link)
                return
            link.accept(welcome(link))
            async for _ in link:
                pass

        quic = await serve_quic(
            handler,
            "127.0.0.1",
            0,
            credentials=pki_ca.server,
            config=config,
            loopback_datagram_size=loopback_datagram_size,
        )
        servers.append(quic)
        ws = await serve_websocket(
            handler, "127.0.0.1", 0, credentials=pki_ca.server, config=config
        )
        servers.append(ws)
        hub = Hub(quic_port=quic.port, websocket_port=ws.port)
        return hub

    yield start
    for server in servers:
        await server.aclose()
