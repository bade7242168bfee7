"""WebSocket transport (websockets' asyncio API), client and server, with mutual TLS.

Each binary WebSocket message carries exactly one frame, length prefix included, so the
session code is the same as over QUIC. Per connection, one :class:`TaskScope` owns a reader
(messages → the link's session) and a writer (the session's frames → ``send()``, which
waits when the socket's write buffer is full); nothing outlives the connection.

WebSocket keepalive pings and compression are off: the session has its own ping/liveness
deadline, and permessage-deflate would cost ~64 KiB of zlib state per connection.

TLS read buffer. asyncio's TLS layer (``asyncio.sslproto.SSLProtocol``) allocates and
touches a 256 KiB read buffer per connection, which alone is four times our per-connection
budget on the hub (10,000 WebSocket sessions at ≤ 64 KiB each): measured, a bare websockets
server with mutual TLS holds ~300 KiB per idle connection. So we do not hand ``ssl=`` to
asyncio; the connection classes below start TLS themselves on the accepted (or connected)
TCP transport, exactly as ``loop.start_tls()`` does, with an ``SSLProtocol`` that reads
through one ``TLS_READ_BUFFER`` (16 KiB, the largest TLS record) shared by every connection
of the thread (see :class:`_LeanSSLProtocol`). Measured: ~46 KiB per idle connection for
the bare library this way, ~63 KiB with a 16 KiB buffer per connection.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import sys
import threading
from asyncio import sslproto
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed as WSConnectionClosed
from websockets.exceptions import InvalidHandshake, InvalidMessage, InvalidURI

from protocol.errors import CloseCode
from protocol.session import Established, Role, Session, SessionConfig
from protocol.transport._tasks import TaskScope
from protocol.transport.errors import ConnectFailed, HandshakeTimeout, TransportError
from protocol.transport.link import TRANSPORT_CLOSE_BOUND, Link
from protocol.transport.link import handshake_failure as _rejection
from protocol.transport.tls import (
    TLSCredentials,
    client_ssl_context,
    peer_node_name,
    server_ssl_context,
)

if TYPE_CHECKING:
    from protocol.messages import Hello, Message
    from protocol.transport.tls import PEMCredentials

__all__ = ["PATH", "TLS_READ_BUFFER", "WebSocketServer", "connect_websocket", "serve_websocket"]

logger = logging.getLogger(__name__)

PATH = "/edgefleet/v1"
"""The URL path of the WebSocket endpoint."""

TLS_READ_BUFFER = 16 * 1024
"""Bytes of TLS read buffer per connection (asyncio's default is 256 KiB)."""

_LENGTH = 4


_scratch = threading.local()


class _LeanSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with one 16 KiB read buffer per thread instead of 256 KiB per
    connection.

    Sharing is safe because the event loop uses the buffer synchronously: it calls
    ``get_buffer()``, ``recv_into()`` it, then ``buffer_updated()``, which copies the bytes
    into the connection's own ``MemoryBIO`` before the callback returns. One buffer per
    thread, since each thread runs its own loop. (Python 3.10's TLS layer has no such
    buffer; setting the attributes there is harmless.)
    """

    max_size = TLS_READ_BUFFER

    def __init__(self, loop: Any, app_protocol: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(loop, app_protocol, *args, **kwargs)
        self._owner = app_protocol
        view = getattr(_scratch, "view", None)
        if view is None:
            view = _scratch.view = memoryview(bytearray(TLS_READ_BUFFER))
        self._ssl_buffer = view.obj
        self._ssl_buffer_view = view

    def connection_lost(self, exc: Exception | None) -> None:
        # asyncio tells the application about a TLS failure only on a later loop turn;
        # record it now so that a failed connect can name it (e.g. the hub's alert).
        if isinstance(exc, ssl.SSLError):
            self._owner.tls_error = exc
        super().connection_lost(exc)


def _start_tls(
    connection: asyncio.Protocol,
    transport: asyncio.BaseTransport,
    context: ssl.SSLContext,
    *,
    server_side: bool,
    server_hostname: str | None,
    handshake_timeout: float,
) -> asyncio.Future[None]:
    """Put TLS between ``transport`` and ``connection``, as ``loop.start_tls()`` does.

    ``connection.connection_made()`` is called again, with the TLS transport, once the
    handshake has succeeded. Returns a future that completes with the handshake.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    kwargs: dict[str, Any] = {"ssl_handshake_timeout": handshake_timeout}
    if sys.version_info >= (3, 11):
        kwargs["ssl_shutdown_timeout"] = TRANSPORT_CLOSE_BOUND
    protocol = _LeanSSLProtocol(
        loop,
        connection,
        context,
        waiter,
        server_side=server_side,
        server_hostname=server_hostname,
        **kwargs,
    )
    transport.set_protocol(protocol)  # type: ignore[attr-defined]
    protocol.connection_made(transport)
    return waiter


class _TLSServerConnection(ServerConnection):
    """A websockets server connection that starts its own lean TLS on the TCP transport."""

    tls_context: ssl.SSLContext
    tls_handshake_timeout: float
    _tls_waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._tls_waiter is None:
            self._tls_waiter = _start_tls(
                self,
                transport,
                self.tls_context,
                server_side=True,
                server_hostname=None,
                handshake_timeout=self.tls_handshake_timeout,
            )
            # A failed handshake only closes the TCP connection; mark it retrieved.
            self._tls_waiter.add_done_callback(_retrieve)
        else:
            super().connection_made(transport)


class _TLSClientConnection(ClientConnection):
    """A websockets client connection that starts its own lean TLS on the TCP transport."""

    tls_context: ssl.SSLContext
    tls_server_hostname: str
    tls_handshake_timeout: float
    _tls_waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._tls_waiter is None:
            self.transport = transport  # type: ignore[assignment]  # to abort until TLS is up
            self._tls_waiter = _start_tls(
                self,
                transport,
                self.tls_context,
                server_side=False,
                server_hostname=self.tls_server_hostname,
                handshake_timeout=self.tls_handshake_timeout,
            )
        else:
            super().connection_made(transport)

    tls_error: ssl.SSLError | None = None
    """The TLS error that ended the connection, if one did (e.g. the hub's alert)."""

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        assert self._tls_waiter is not None
        await self._tls_waiter  # raises the TLS error, if any
        await super().handshake(*args, **kwargs)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class _WebSocketEndpoint:
    """One WebSocket connection bound to one link: reader and writer in one task scope.

    Frames the application sends go out from its own task (``Link.send`` awaits
    :meth:`flush`, which waits when the socket's write buffer is full: back-pressure, and
    one task switch less per message). Frames the session makes by itself (acks, pings,
    its close) are sent by the writer task, which is woken only for them. One flusher at a
    time, from one queue, so frames keep their order.
    """

    message_based = True

    def __init__(self, ws: ClientConnection | ServerConnection, link: Link) -> None:
        self._ws = ws
        self._link = link
        self._out: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._kick_scheduled = False
        self._flushing = False
        self._flushed = asyncio.Event()
        self._flushed.set()
        self._scope = TaskScope()

    def start(self) -> None:
        self._scope.create_task(self._reader(), name="ws-reader")
        self._scope.create_task(self._writer(), name="ws-writer")

    def write(self, data: bytes) -> None:  # pragma: no cover - the link uses write_frames
        raise NotImplementedError("WebSocket links write frames, one per message")

    def write_frames(self, frames: list[bytes]) -> None:
        self._out.extend(frames)
        self._flushed.clear()
        if not self._kick_scheduled:
            # Wake the writer at the end of this loop iteration, unless an application
            # send has flushed these frames inline by then.
            self._kick_scheduled = True
            asyncio.get_running_loop().call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_scheduled = False
        if self._out and not self._flushing:
            self._wake.set()

    async def send_frames(self, frames: list[bytes]) -> None:
        """Queue frames and send them from the calling task (the application's send)."""
        if frames:
            self._out.extend(frames)
            self._flushed.clear()
            await self.flush()

    async def flush(self) -> None:
        """Send the queued frames from the calling task (no-op if another task is).

        A closed connection is not an error here: the reader reports it to the link.
        """
        if self._flushing:
            return
        ws, out = self._ws, self._out
        self._flushing = True
        try:
            while out:
                await ws.send(out.popleft())
        except WSConnectionClosed:
            out.clear()
        finally:
            self._flushing = False
            if not out:
                self._flushed.set()

    async def _reader(self) -> None:
        ws, link = self._ws, self._link
        reason = "the WebSocket connection closed"
        try:
            while True:
                message = await ws.recv()
                if isinstance(message, str):
                    reason = "the peer sent a text message"
                    break
                link.data_received(message)
        except WSConnectionClosed as exc:
            rcvd = exc.rcvd
            if rcvd is not None:
                reason = f"WebSocket closed: {rcvd.code} {rcvd.reason}".rstrip()
        link.connection_lost(reason)

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def aclose(self, timeout: float) -> None:
        """Flush what is queued (e.g. our ``close``), close the WebSocket; abort at ``timeout``."""
        try:
            await asyncio.wait_for(self._close_cleanly(), timeout)
        except (asyncio.TimeoutError, OSError, WSConnectionClosed):
            pass
        finally:
            self._ws.transport.abort()
            await self._scope.aclose()

    async def _close_cleanly(self) -> None:
        await self._flushed.wait()
        await self._ws.close()


# -- client ---------------------------------------------------------------------------------


async def connect_websocket(
    host: str,
    port: int,
    *,
    credentials: TLSCredentials | PEMCredentials,
    hello: Hello,
    pending: Iterable[tuple[int, Message]] = (),
    next_seq: int = 1,
    config: SessionConfig | None = None,
    server_name: str | None = None,
    timeout: float = 10.0,
) -> Link:
    """Dial the hub over WebSocket (TLS over TCP) and open a session.

    Args:
        host: hub address or name.
        port: hub TCP port.
        credentials: the hub CA to verify against and our node certificate.
        hello: our hello.
        pending: unacknowledged ``(seq, message)`` pairs from earlier sessions.
        next_seq: the next sequence number to assign (persisted by the caller).
        config: session settings; defaults if omitted.
        server_name: the name to verify the hub certificate against; ``host`` if omitted.
        timeout: seconds for TCP, TLS, the WebSocket upgrade and hello/welcome together.

    Returns:
        An established link.

    Raises:
        HandshakeTimeout: not established within ``timeout``.
        SessionRejected: the hub closed the session during the handshake.
        ConnectFailed: refused, unreachable, TLS or certificate failure, or the HTTP
            upgrade was refused.
    """
    config = config if config is not None else SessionConfig()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    context = client_ssl_context(credentials)
    hostname = server_name or host

    created: list[_TLSClientConnection] = []

    def create_connection(*args: Any, **kwargs: Any) -> _TLSClientConnection:
        connection = _TLSClientConnection(*args, **kwargs)
        created.append(connection)
        connection.tls_context = context
        connection.tls_server_hostname = hostname
        connection.tls_handshake_timeout = timeout
        return connection

    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    where = f"wss://{netloc}{PATH}"
    try:
        ws = await ws_connect(
            f"ws://{netloc}{PATH}",  # TLS is started by _TLSClientConnection itself
            create_connection=create_connection,
            open_timeout=timeout,
            ping_interval=None,
            compression=None,
            max_size=config.max_frame_size + _LENGTH,
            close_timeout=TRANSPORT_CLOSE_BOUND,
            proxy=None,
        )
    except asyncio.TimeoutError:
        raise HandshakeTimeout(
            f"{where}: not connected within {timeout} s", timeout=timeout
        ) from None
    except (OSError, InvalidHandshake, InvalidURI, WSConnectionClosed) as exc:
        # With TLS 1.3 a certificate the hub rejects surfaces as a TLS alert while the
        # upgrade response is read: name the alert, not only "no valid HTTP response".
        tls_error = created[-1].tls_error if created else None
        if tls_error is not None:
            detail = f"TLS: {tls_error}"
        elif isinstance(exc, InvalidMessage):
            # asyncio's TLS server drops a rejected client without sending the alert.
            detail = (
                f"the hub closed the connection before the WebSocket upgrade ({exc}): "
                "our client certificate was probably rejected"
            )
        else:
            detail = str(exc)
        raise ConnectFailed(f"{where}: {detail}") from exc
    link = Link(
        "websocket",
        Session(role=Role.CLIENT, config=config, now=loop.time(), next_seq=next_seq),
        peer_node_name=None,
    )
    endpoint = _WebSocketEndpoint(ws, link)
    link.attach(endpoint)
    endpoint.start()
    try:
        link.start_client(hello, pending)
        try:
            opened = await link.wait_opened(max(deadline - loop.time(), 0.0))
        except asyncio.TimeoutError:
            raise HandshakeTimeout(
                f"no welcome from {where} within {timeout} s", timeout=timeout
            ) from None
        if not isinstance(opened, Established):
            raise _rejection(opened, where)
    except BaseException:
        link.connection_lost("connect failed")
        await link.wait_closed()
        raise
    return link


# -- server ---------------------------------------------------------------------------------

Handler = Callable[[Link], Awaitable[None]]


class WebSocketServer:
    """A WebSocket listener (see :func:`serve_websocket`)."""

    def __init__(self) -> None:
        self._server: Any = None
        self._links: set[Link] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return self._server.sockets[0].getsockname()[1]

    @property
    def connections(self) -> int:
        """Links currently open (hello received, handler running)."""
        return len(self._links)

    async def aclose(self) -> None:
        """Close every link (GOING_AWAY, bounded), stop accepting, wait for every handler."""
        await asyncio.gather(
            *(link.close(CloseCode.GOING_AWAY, "hub shutting down") for link in self._links),
            return_exceptions=True,
        )
        self._server.close()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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
        hello_timeout: seconds for the TLS handshake, then the upgrade, then the hello.
        backlog: the listen backlog (connections not yet accepted).

    Returns:
        The running server.

    Raises:
        TransportError: the address cannot be bound or the credentials do not load.
    """
    config = config if config is not None else SessionConfig()
    context = server_ssl_context(credentials)

    def create_connection(*args: Any, **kwargs: Any) -> _TLSServerConnection:
        connection = _TLSServerConnection(*args, **kwargs)
        connection.tls_context = context
        connection.tls_handshake_timeout = hello_timeout
        return connection

    result = WebSocketServer()

    async def serve_one(ws: ServerConnection) -> None:
        task = asyncio.current_task()
        assert task is not None
        result._tasks.add(task)
        try:
            await _serve_one(ws)
        finally:
            result._tasks.discard(task)

    async def _serve_one(ws: ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        ssl_object = ws.transport.get_extra_info("ssl_object")
        try:
            node = peer_node_name(ssl_object.getpeercert(binary_form=True))
        except TransportError as exc:
            await ws.close(1008, str(exc)[:120])
            return
        link = Link(
            "websocket",
            Session(role=Role.SERVER, config=config, now=loop.time(), next_seq=1),
            peer_node_name=node,
        )
        endpoint = _WebSocketEndpoint(ws, link)
        link.attach(endpoint)
        endpoint.start()
        result._links.add(link)
        try:
            try:
                opened = await link.wait_opened(hello_timeout)
            except asyncio.TimeoutError:
                return
            if opened is None or link.closed:
                return
            try:
                await handler(link)
            except Exception:
                logger.exception("WebSocket link handler failed (node %s)", node)
                await link.close(CloseCode.INTERNAL_ERROR, "handler failed")
        finally:
            result._links.discard(link)
            await link.close()

    def process_request(connection: ServerConnection, request: Any) -> Any:
        if request.path != PATH:
            return connection.respond(404, f"no endpoint at {request.path}\n")
        return None

    try:
        server = await ws_serve(
            serve_one,
            host,
            port,
            create_connection=create_connection,
            process_request=process_request,
            open_timeout=hello_timeout,
            ping_interval=None,
            compression=None,
            max_size=config.max_frame_size + _LENGTH,
            max_queue=4,
            close_timeout=TRANSPORT_CLOSE_BOUND,
            backlog=backlog,
        )
    except OSError as exc:
        raise TransportError(f"cannot listen on tcp {host}:{port}: {exc}") from exc
    result._server = server
    return result
