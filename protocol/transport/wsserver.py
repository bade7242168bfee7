"""The WebSocket listener: accepts TCP, puts TLS on it with the shared read buffer, and
hands each connection whose client certificate names a node to the hub as a
:class:`~protocol.transport.link.Link` (the connection itself is
``protocol.transport.websocket``'s; this module only admits and serves them).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.server import ServerProtocol

from protocol.config import SessionConfig
from protocol.transport.admission import PendingLimit, serve_link, server_link, shut_down
from protocol.transport.errors import TransportError
from protocol.transport.link import Link
from protocol.transport.tls import TLSCredentials, server_ssl_context

# the connection class and its message bound are this listener's other half
from protocol.transport.websocket import _max_message, _WebSocketConnection

__all__ = ["WebSocketServer", "serve_websocket"]

logger = logging.getLogger("protocol.transport.websocket")

# -- server ---------------------------------------------------------------------------------

Handler = Callable[[Link], Awaitable[None]]


class WebSocketServer:
    """A WebSocket listener (see :func:`serve_websocket`).

    Each accepted connection whose client certificate names a node and whose upgrade and
    hello arrive within ``hello_timeout`` is handed to the handler as a :class:`Link`; the
    link is closed when the handler returns.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        credentials: TLSCredentials,
        config: SessionConfig,
        hello_timeout: float,
        max_pending_per_source: int | None = None,
        max_pending: int | None = None,
        busy: Callable[[], bool] | None = None,
        max_pending_busy: int = 1,
    ) -> None:
        self._handler = handler
        self._context = server_ssl_context(credentials)
        self._config = config
        self._hello_timeout = hello_timeout
        self._limit = (
            PendingLimit(
                max_pending_per_source or sys.maxsize,
                max_pending,
                busy=busy,
                busy_total=max_pending_busy,
            )
            if max_pending_per_source is not None or max_pending is not None or busy
            else None
        )
        self.unfinished = 0
        """Connections that ended before their upgrade (TLS failed, timed out, closed)."""
        self._server: asyncio.Server | None = None
        self._connections: set[_WebSocketConnection] = set()
        self._links: set[Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    def set_credentials(self, credentials: TLSCredentials) -> None:
        """Serve new connections with ``credentials`` (a reissued or rotated certificate,
        or a new CA bundle for client certificates); open connections keep theirs.

        Raises:
            TransportError: the credentials carry no server certificate or do not load.
        """
        self._context = server_ssl_context(credentials)

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def connections(self) -> int:
        """Links currently open (hello received, handler running)."""
        return len(self._links)

    def _connection(self) -> _WebSocketConnection:
        """A new TCP connection (the listener's protocol factory)."""
        conn = _WebSocketConnection(
            ServerProtocol(max_size=_max_message(self._config)),
            self._context,
            where="websocket client",
            server_hostname=None,
            handshake_timeout=self._hello_timeout,
            on_open=self._opened,
            on_done=self._done,
            admit=self._admit,
        )
        self._connections.add(conn)
        # TLS and the upgrade together get hello_timeout; the hello gets it again.
        timer = asyncio.get_running_loop().call_later(
            self._hello_timeout, self._upgrade_timed_out, conn
        )
        conn.opened.add_done_callback(lambda _: timer.cancel())
        conn.lost.add_done_callback(lambda _: timer.cancel())
        return conn

    def _admit(self, conn: _WebSocketConnection, transport: Any) -> bool:
        """Count a new TCP connection against its source's pending handshakes."""
        if self._limit is None:
            return True
        release = self._limit.admit(transport.get_extra_info("peername"))
        if release is None:
            return False
        for future in (conn.opened, conn.lost):  # the upgrade done, or the end: once
            future.add_done_callback(lambda _: release())
        return True

    @property
    def refused_pending(self) -> int:
        """Connections dropped at once: their source had ``max_pending_per_source``
        connections in TLS or the upgrade already."""
        return self._limit.refused if self._limit is not None else 0

    @property
    def refused_busy(self) -> int:
        """Connections dropped at once: ``max_pending`` connections (``max_pending_busy``
        while ``busy()``) were in TLS or the upgrade already (all sources together)."""
        return self._limit.refused_total if self._limit is not None else 0

    def _done(self, conn: _WebSocketConnection) -> None:
        self._connections.discard(conn)
        if not conn.opened.done() or conn.opened.exception() is not None:
            self.unfinished += 1

    def _upgrade_timed_out(self, conn: _WebSocketConnection) -> None:
        if not conn.opened.done():
            logger.debug("WebSocket client: no upgrade within %s s", self._hello_timeout)
            conn.abort()

    def _opened(self, conn: _WebSocketConnection) -> None:
        """The upgrade was accepted: make the link and run the handler for it."""
        if self._closing:
            conn.abort()
            return
        link = server_link(
            "websocket",
            self._config,
            peer_node_name=conn.peer_node_name,
            peer_certificate=conn.peer_certificate,
        )
        conn.attach(link)
        self._links.add(link)
        task = asyncio.get_running_loop().create_task(self._serve(link), name="ws-conn")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, link: Link) -> None:
        """One link: hello, handler, close (owned by the server)."""
        try:
            await serve_link(link, self._handler, self._hello_timeout, logger)
        finally:
            self._links.discard(link)
            await link.close()

    async def aclose(self, retry_after: Callable[[], float | None] | None = None) -> None:
        """Close every link (GOING_AWAY, bounded), stop accepting, wait for every handler.

        Args:
            retry_after: ``() -> seconds`` drawn for each link's ``GOING_AWAY`` (see
                :func:`protocol.transport.admission.shut_down`), or ``None``.
        """
        self._closing = True
        if self._server is not None:
            self._server.close()
        await shut_down(self._links, self._tasks, retry_after)
        for conn in list(self._connections):  # still in TLS or the upgrade
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> WebSocketServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def serve_websocket(
    handler: Handler,
    host: str,
    port: int,
    *,
    credentials: TLSCredentials,
    config: SessionConfig | None = None,
    hello_timeout: float = 10.0,
    backlog: int = 1024,
    max_pending_per_source: int | None = None,
    max_pending: int | None = None,
    busy: Callable[[], bool] | None = None,
    max_pending_busy: int = 1,
) -> WebSocketServer:
    """Listen for agents over WebSocket (TLS over TCP).

    Args:
        handler: coroutine called with each link once its hello has arrived (read
            ``link.hello`` and ``link.peer_node_name``, then ``link.accept(welcome)`` or
            ``link.reject(code, reason)``); the link is closed when it returns.
        host: address to bind (``"::"`` for every address).
        port: TCP port (0 picks a free one: read ``server.port``).
        credentials: the hub CA and the hub's server certificate and key.
        config: session settings; defaults if omitted.
        hello_timeout: seconds for the TLS handshake and the upgrade, then again for
            the hello.
        backlog: the listen backlog (connections not yet accepted).
        max_pending_per_source: connections one source address may have in TLS or the
            upgrade at once; more are dropped as they arrive (``None``: no limit). Bounds
            what a peer that opens connections and never finishes them can hold.
        max_pending: connections all sources together may have in TLS or the upgrade at
            once; more are dropped as they arrive, before TLS (``None``: no limit). Bounds
            the event loop's lag when a whole fleet reconnects at once.
        busy: ``() -> bool``, asked as each connection arrives: true while the handler
            would turn new sessions away (``None``: never).
        max_pending_busy: connections all sources together may have in TLS or the
            upgrade at once while ``busy()`` (>= 1); more are dropped as they arrive, so
            a hub that would refuse them after TLS does not pay for their handshakes.

    Returns:
        The running server.

    Raises:
        TransportError: the address cannot be bound or the credentials do not load.
    """
    config = config if config is not None else SessionConfig()
    result = WebSocketServer(
        handler,
        credentials=credentials,
        config=config,
        hello_timeout=hello_timeout,
        max_pending_per_source=max_pending_per_source,
        max_pending=max_pending,
        busy=busy,
        max_pending_busy=max_pending_busy,
    )
    loop = asyncio.get_running_loop()
    try:
        result._server = await loop.create_server(result._connection, host, port, backlog=backlog)
    except OSError as exc:
        raise TransportError(f"cannot listen on tcp {host}:{port}: {exc}") from exc
    return result
