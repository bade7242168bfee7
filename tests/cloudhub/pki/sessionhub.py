"""A minimal session server over the real transports, wired to ``HubPKI`` exactly as the
hub's session server is meant to be (see ``cloudhub/pki/hub.py``): revoked certificates
refused at accept, ``cert_renew_request`` answered by ``HubPKI.renew``, sessions of
revoked nodes closed by the revocation listener. It records every numbered message."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

from cloudhub.pki import CertificateRevoked, HubPKI
from protocol.config import SessionConfig
from protocol.errors import CloseCode
from protocol.events import MessageReceived
from protocol.messages import PROTOCOL_VERSION, CertRenewRequest, Hello, Message, Welcome
from protocol.transport import Link, serve_quic, serve_websocket


@dataclass
class SessionHub:
    pki: HubPKI
    config: SessionConfig | None = None
    links: dict[str, Link] = field(default_factory=dict)
    received: dict[str, list[tuple[int, Message]]] = field(default_factory=dict)
    renewals: list[tuple[str, bool]] = field(default_factory=list)
    """(node, issued) per renewal request answered."""
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    quic_port: int = 0
    websocket_port: int = 0

    async def start(self) -> SessionHub:
        credentials = self.pki.serving_credentials()
        self._servers = [
            await serve_quic(
                self._handler, "127.0.0.1", 0, credentials=credentials, config=self.config
            ),
            await serve_websocket(
                self._handler, "127.0.0.1", 0, credentials=credentials, config=self.config
            ),
        ]
        self.quic_port, self.websocket_port = (s.port for s in self._servers)
        self._closers: set[asyncio.Task] = set()
        self.pki.add_revocation_listener(self._revoked)
        return self

    def port(self, transport: str) -> int:
        return self.quic_port if transport == "quic" else self.websocket_port

    async def close(self) -> None:
        for server in self._servers:
            await server.aclose()
        await asyncio.gather(*self._closers, return_exceptions=True)

    def _revoked(self, node: str, serials: frozenset[int]) -> None:
        link = self.links.get(node)
        if link is not None and link.peer_certificate.serial_number in serials:
            task = asyncio.create_task(link.close(CloseCode.UNAUTHORIZED, "certificate revoked"))
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, predicate, timeout: float = 20.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), timeout)

    async def _handler(self, link: Link) -> None:
        node = link.peer_node_name
        assert node is not None and link.peer_certificate is not None
        try:
            self.pki.check(link.peer_certificate)
        except CertificateRevoked as exc:
            link.reject(CloseCode.UNAUTHORIZED, str(exc))
            return
        if link.hello.node_name != node:
            link.reject(CloseCode.UNAUTHORIZED, "hello names another node than the certificate")
            return
        link.accept(
            Welcome(
                version=link.version,
                hub_time=time.time(),
                session_id=uuid.uuid4().hex,
                received_up_to=0,
                heartbeat_interval=link.session.config.ping_interval,
            )
        )
        self.links[node] = link
        await self._notify()
        async for event in link:
            if not isinstance(event, MessageReceived):
                continue
            message = event.message
            if isinstance(message, CertRenewRequest):
                response = await self.pki.renew(node, message, link.peer_certificate)
                self.renewals.append((node, response.error is None))
                await link.send(response)
            elif event.seq is not None:
                self.received.setdefault(node, []).append((event.seq, message))
            await self._notify()
        if self.links.get(node) is link:
            del self.links[node]
        await self._notify()


def hello(node: str) -> Hello:
    return Hello(
        min_version=PROTOCOL_VERSION,
        max_version=PROTOCOL_VERSION,
        node_name=node,
        agent_version="test",
    )
