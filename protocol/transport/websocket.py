"""WebSocket transport (websockets' Sans-I/O layer), client and server, with mutual TLS.

Like the QUIC adapter, this one drives two sans-I/O state machines directly and runs no
task per connection: websockets' ``ClientProtocol`` / ``ServerProtocol`` (the HTTP upgrade
and the WebSocket framing) and the link's ``Session``. Bytes in (the asyncio protocol's
``data_received``) → WebSocket frames → the session → what the session has to send →
binary WebSocket messages → the TLS transport. websockets' own asyncio API is built on the
same Sans-I/O layer and adds, per connection, a reader task, a message queue and a
coroutine per send; for 1 KiB messages those cost as much as the whole protocol layer
(measured: see tests/bench/bench_protocol.py), so the adapter goes one level down, as
STYLE.md §2 describes.

Messages (docs/protocol.md): each binary WebSocket message carries one or more whole
frames, length prefix included, so the session code is the same as over QUIC. The link
flushes what the session has ready once per event-loop iteration, and this adapter packs
those frames into messages of at most ``BATCH_BYTES`` (a larger frame goes alone), the
session's CONTROL frames always in a message and a TLS write of their own, ahead of the
rest: a peer sees a message only once it is whole, so a welcome, an ack or a pong must not
wait for the bulk packed after it. A receiver accepts messages up to
``max(max_frame_size + 4, BATCH_BYTES)`` bytes. Messages are fed to the session as they
come; a text message ends the connection.

WebSocket keepalive pings and compression are off: the session has its own ping/liveness
deadline, and permessage-deflate would cost ~64 KiB of zlib state per connection.
websockets still answers a peer's WebSocket ping, as RFC 6455 requires.

TLS is started per connection, with one read buffer per thread instead of asyncio's 256 KiB
per connection: :mod:`protocol.transport.leantls`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidURI
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

from protocol.config import SessionConfig
from protocol.events import Established
from protocol.session import Role, Session
from protocol.transport.errors import (
    CertificateRejected,
    ConnectFailed,
    HandshakeTimeout,
    TransportError,
)
from protocol.transport.leantls import TLS_READ_BUFFER, certificate_alert, start_tls
from protocol.transport.link import Link
from protocol.transport.link import handshake_failure as _rejection
from protocol.transport.tls import (
    TLSCredentials,
    client_ssl_context,
    parse_certificate,
    peer_node_name,
)

if TYPE_CHECKING:
    from cryptography import x509

    from protocol.messages import Hello, Message
    from protocol.transport.tls import PEMCredentials

__all__ = [
    "BATCH_BYTES",
    "PATH",
    "TLS_READ_BUFFER",
    "connect_websocket",
]

logger = logging.getLogger(__name__)

PATH = "/edgefleet/v1"
"""The URL path of the WebSocket endpoint."""

WRITE_HIGH = 64 * 1024
"""Bytes the TLS transport may buffer before it pauses our writes (asyncio's: 512 KiB)."""

UNSENT_LOWAT = 16 * 1024
"""Bytes the kernel may hold unsent per WebSocket connection (``TCP_NOTSENT_LOWAT``)."""

REPLY_BUDGET = 256 * 1024
"""Bytes of replies (pongs, acks, errors) the hub writes while its transport is over its
high-water mark before it stops reading the peer (a peer that sends and never reads)."""

BATCH_BYTES = 64 * 1024
"""Largest WebSocket message (bytes) made by joining frames; a larger frame goes alone.
64 KiB already spreads websockets' and TLS's per-message cost over 60 1-KiB frames."""

_LENGTH = 4
_OPEN = State.OPEN
_BINARY, _TEXT, _CONT, _CLOSE = Opcode.BINARY, Opcode.TEXT, Opcode.CONT, Opcode.CLOSE
_NORMAL_CLOSURE = 1000
_POLICY_VIOLATION = 1008
_UNSUPPORTED_DATA = 1003


def _max_message(config: SessionConfig) -> int:
    return max(config.max_frame_size + _LENGTH, BATCH_BYTES)


def _limit_unsent(transport: asyncio.BaseTransport) -> None:
    """Keep at most ``UNSENT_LOWAT`` bytes unsent in the kernel's socket buffer.

    Linux autotunes a TCP send buffer up to megabytes; whatever sits there is beyond the
    session's lanes, so a heartbeat written after it waits for all of it (on a 64 kbit/s
    link, minutes). With ``TCP_NOTSENT_LOWAT`` the kernel takes more only while little is
    unsent: the rest waits in the session, where control frames go first.
    """
    transport.set_write_buffer_limits(high=UNSENT_LOWAT)  # type: ignore[attr-defined]
    sock = transport.get_extra_info("socket")
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if sock is None or option is None:  # not Linux (or not TCP): the lanes still order
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, option, UNSENT_LOWAT)
    except OSError:  # pragma: no cover - a kernel without it
        logger.debug("TCP_NOTSENT_LOWAT refused", exc_info=True)


def _done(future: asyncio.Future[Any], result: Any = None) -> None:
    if not future.done():
        future.set_result(result)


class _WebSocketConnection(asyncio.Protocol):
    """One TCP connection: lean TLS, then websockets' Sans-I/O protocol, then one link.

    The upgrade outcome is ``opened`` (a future: ``None``, or ``ConnectFailed`` on the
    client); ``on_open`` (server) is called once the upgrade is accepted. The link is
    attached with :meth:`attach`; from then on WebSocket messages feed its session, and
    :meth:`data_ready` says the link's session has frames to send.
    """

    def __init__(
        self,
        ws: ClientProtocol | ServerProtocol,
        context: ssl.SSLContext,
        *,
        where: str,
        server_hostname: str | None,
        handshake_timeout: float,
        on_open: Callable[[_WebSocketConnection], None] | None = None,
        on_done: Callable[[_WebSocketConnection], None] | None = None,
        admit: Callable[[_WebSocketConnection, Any], bool] | None = None,
    ) -> None:
        self._ws = ws
        self._client = isinstance(ws, ClientProtocol)
        self._context = context
        self._where = where
        self._server_hostname = server_hostname
        self._handshake_timeout = handshake_timeout
        self._on_open = on_open
        self._on_done = on_done
        self._admit = admit
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.opened: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self._close_done: asyncio.Future[None] = loop.create_future()  # close frame or lost
        self._tcp: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None  # the TLS transport, once up
        self.tls_error: ssl.SSLError | None = None
        self.link: Link | None = None
        self._early: list[bytes] = []
        self._text = False  # inside a text message (a violation: ends the connection)
        self._flush_scheduled = False
        self._paused = False
        self._replies_paused = 0  # control bytes written while paused (see pause_writing)
        self._unread = False  # the hub stopped reading (replies over REPLY_BUDGET)
        self._writable: asyncio.Future[None] | None = None
        self.peer_node_name: str | None = None
        self.peer_certificate: x509.Certificate | None = None

    # -- connection life ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._tcp is None:  # TCP is up: start TLS on it
            self._tcp = transport  # type: ignore[assignment]
            if self._admit is not None and not self._admit(self, transport):
                transport.abort()  # connection_lost() follows, then _ended()
                return
            _limit_unsent(transport)
            waiter = start_tls(
                self,
                transport,
                self._context,
                server_side=not self._client,
                server_hostname=self._server_hostname,
                handshake_timeout=self._handshake_timeout,
            )
            waiter.add_done_callback(self._tls_done)
            return
        self.transport = transport  # type: ignore[assignment]
        # asyncio's TLS transport buffers up to 512 KiB before it pauses us: behind that a
        # heartbeat waits 64 s at 64 kbit/s. Pause at WRITE_HIGH: the rest waits in lanes.
        transport.set_write_buffer_limits(high=WRITE_HIGH)  # type: ignore[attr-defined]
        if self._client:  # TLS is up: ask for the upgrade
            ws = self._ws
            assert isinstance(ws, ClientProtocol)
            ws.send_request(ws.connect())
            self._send_pending()

    def _tls_done(self, waiter: asyncio.Future[None]) -> None:
        exc = None if waiter.cancelled() else waiter.exception()
        if exc is None and not waiter.cancelled() and self.transport is not None:
            return  # up: asyncio called connection_made() with the TLS transport first
        # Failed, timed out, or closed or aborted under it (our upgrade deadline aborts
        # it: asyncio then wakes the waiter with no exception, as for a clean EOF; taken
        # for success, that kept every aborted half-open handshake in the server's
        # connection set: ~5 KiB each, docs/hub.md). No connection_lost() follows.
        if exc is not None:
            detail = f"TLS: {exc}"
        elif waiter.cancelled():
            detail = "TLS handshake cancelled"
        else:
            detail = "the connection closed during the TLS handshake"
        self._fail_open(ConnectFailed(f"{self._where}: {detail}"))
        self._ended()

    def data_received(self, data: bytes) -> None:
        ws = self._ws
        if self.link is not None:
            self.link.heard()  # bytes count as liveness, whole WebSocket messages or not
        ws.receive_data(data)
        chunks: list[bytes] = []
        control = False  # anything but data: websockets may have something to send
        for event in ws.events_received():
            if event.__class__ is Frame:
                opcode = event.opcode
                if opcode is _BINARY or (opcode is _CONT and not self._text):
                    chunks.append(event.data)
                    continue
                if opcode is _TEXT:
                    self._text = True
                elif opcode is _CLOSE:
                    _done(self._close_done)
            elif isinstance(event, Request):
                self._upgrade_requested(event)
            elif isinstance(event, Response):
                self._upgrade_answered()
            control = True
        if chunks:
            self._deliver(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if self._text and ws.state is _OPEN:
            ws.fail(_UNSUPPORTED_DATA, "binary messages only")
            if self.link is not None:
                self.link.connection_lost("the peer sent a text message")
        if control or ws.state is not _OPEN:  # a pong, a close, an error, the upgrade
            self._send_pending()
        if ws.close_rcvd is not None and self.link is not None:
            self.link.connection_lost(self._closed_reason())

    def eof_received(self) -> bool | None:
        self._ws.receive_eof()
        self._send_pending()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._ws.receive_eof()
        if exc is None and self.tls_error is not None:
            exc = self.tls_error
        if not self.opened.done():
            failure: ConnectFailed
            alert = certificate_alert(self.tls_error)
            if alert is not None and self._client:
                failure = CertificateRejected(f"{self._where}: TLS: {self.tls_error}", alert=alert)
            elif self.tls_error is not None:
                failure = ConnectFailed(f"{self._where}: TLS: {self.tls_error}")
            elif not self._client:
                failure = ConnectFailed(
                    f"{self._where}: the connection closed before the WebSocket upgrade"
                )
            else:
                # TLS came up on our side, then the hub hung up without answering the
                # upgrade: asyncio's TLS server drops a client whose certificate it
                # rejects (which it checks after our side of the TLS 1.3 handshake is
                # done) without sending the alert.
                failure = CertificateRejected(
                    f"{self._where}: the hub closed the connection right after the TLS "
                    "handshake, before the WebSocket upgrade: it rejected our client "
                    "certificate"
                )
            self._fail_open(failure)
        if self.link is not None:
            reason = self._closed_reason()
            if exc is not None and self._ws.close_rcvd is None:
                reason = f"{reason}: {exc}"
            self.link.connection_lost(reason)
        self._ended()

    def _ended(self) -> None:
        _done(self.lost)
        _done(self._close_done)
        self._wake_writers()
        if self._on_done is not None:
            on_done, self._on_done = self._on_done, None
            on_done(self)

    def _closed_reason(self) -> str:
        rcvd = self._ws.close_rcvd
        if rcvd is not None:
            return f"WebSocket closed: {rcvd.code} {rcvd.reason}".rstrip()
        return "the WebSocket connection closed"

    def abort(self) -> None:
        """Drop the connection at once (no close handshake)."""
        if self.transport is not None:
            self.transport.abort()
        elif self._tcp is not None:
            self._tcp.abort()

    # -- the upgrade --------------------------------------------------------------------------

    def _upgrade_requested(self, request: Request) -> None:
        ws = self._ws
        assert isinstance(ws, ServerProtocol)
        if request.path != PATH:
            ws.send_response(ws.reject(404, f"no endpoint at {request.path}\n"))
            return
        response = ws.accept(request)
        ws.send_response(response)
        # websockets' parser keeps the request for the connection's life (a local of its
        # generator); its headers are ~1.5 KiB per session, of no use once answered.
        request.headers.clear()
        response.headers.clear()
        if response.status_code != 101:
            return  # an invalid upgrade request: the response says why, then EOF
        assert self.transport is not None
        ssl_object = self.transport.get_extra_info("ssl_object")
        try:
            der = ssl_object.getpeercert(binary_form=True)
            if der is None:
                raise TransportError("the peer presented no certificate")
            self.peer_certificate = parse_certificate(der)
            self.peer_node_name = peer_node_name(self.peer_certificate)
        except TransportError as exc:
            ws.send_close(_POLICY_VIOLATION, str(exc)[:120])
            self._send_pending()
            self.transport.close()
            return
        _done(self.opened)
        if self._on_open is not None:
            self._on_open(self)

    def _upgrade_answered(self) -> None:
        exc = self._ws.handshake_exc
        if exc is not None:
            self._fail_open(ConnectFailed(f"{self._where}: the WebSocket upgrade failed: {exc}"))
            if self.transport is not None:
                self.transport.close()
            return
        _done(self.opened)

    def _fail_open(self, exc: Exception) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc)
            self.opened.exception()  # retrieved: nobody may be waiting any more

    # -- bytes in and out ---------------------------------------------------------------------

    def attach(self, link: Link) -> None:
        """Bind the link: from now on binary messages feed its session."""
        self.link = link
        link.attach(self)
        early, self._early = self._early, []
        for data in early:
            link.data_received(data)

    def _deliver(self, data: bytes) -> None:
        if self.link is None:
            self._early.append(data)  # before attach(): kept for the link
        else:
            self.link.data_received(data)

    def data_ready(self) -> None:
        """The link's session has frames: they leave at the end of this loop iteration,
        packed into binary messages of at most ``BATCH_BYTES`` (at once if that much is
        waiting), for as long as the TLS transport is writable (control frames always)."""
        link = self.link
        if link is not None and link.session.bytes_to_send >= BATCH_BYTES:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        """Send the session's frames now: its control frames, then its status and bulk
        frames a batch at a time while the TLS transport is under its high-water mark
        (``resume_writing`` sends more). So the socket buffer never holds more than that
        mark of bulk data ahead of a heartbeat."""
        link = self.link
        if link is None:
            return
        session = link.session
        while True:
            # CONTROL frames (a welcome, an ack, a pong) go as a message and a TLS write of
            # their own: a receiver sees a WebSocket message only once it is whole (and
            # TLS data only by whole records), so a welcome packed in front of 48 KiB of a
            # ConfigMap reached the agent 6 s later at 64 kbit/s; the agent, silent until
            # then, was declared dead by the hub (issue 15, the break1 finding).
            control = session.frames_to_send(0)
            if control and not self._send_frames(link, control):
                return  # paused (what waits leaves at resume_writing) or closing
            if self._paused or not session.bytes_to_send:
                return
            frames = session.frames_to_send(BATCH_BYTES)
            if frames:
                link.taken()
            if not frames or not self._send_frames(link, frames) or not session.bytes_to_send:
                return

    def _send_frames(self, link: Link, frames: list[bytes]) -> bool:
        ws = self._ws
        if ws.state is not _OPEN or self.transport is None:
            return False  # closing: the session said its last word already, or cannot any more
        size = sum(map(len, frames))
        link.bytes_out += size
        if self._paused:
            self._replied_while_paused(size)
        send = ws.send_binary
        if len(frames) == 1:
            send(frames[0])
        else:
            batch: list[bytes] = []
            size = 0
            for frame in frames:
                n = len(frame)
                if batch and size + n > BATCH_BYTES:
                    send(batch[0] if len(batch) == 1 else b"".join(batch))
                    batch, size = [], 0
                batch.append(frame)
                size += n
            send(batch[0] if len(batch) == 1 else b"".join(batch))
        self._send_pending()
        return not self._paused

    def _send_pending(self) -> None:
        writes = self._ws.data_to_send()
        transport = self.transport
        if not writes or transport is None or transport.is_closing():
            return
        if writes[-1]:
            transport.write(writes[0] if len(writes) == 1 else b"".join(writes))
            return
        # websockets asks to end the stream (b"" last): TLS cannot half-close, so close.
        data = b"".join(writes)
        if data:
            transport.write(data)
        transport.close()

    # flow control: the TLS transport's buffer over / under its high-water mark

    def pause_writing(self) -> None:
        self._paused = True
        self._replies_paused = 0

    def _replied_while_paused(self, n: int) -> None:
        # What the hub writes unprompted waits in the session's lanes while paused, but
        # pongs, errors and acks (CONTROL) answer what it reads and are written anyway: a
        # peer that keeps sending and reads nothing would make it buffer them without
        # bound. Past REPLY_BUDGET of them, read no more until the peer drains our writes
        # (the agent always reads, so the two can never wait on each other). Bulk alone
        # never stops the reading: the agent's acks and pings must get through it.
        self._replies_paused += n
        transport = self.transport
        if self._replies_paused > REPLY_BUDGET and not self._client and not self._unread:
            if transport is not None and not transport.is_closing():
                self._unread = True
                transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._unread and self.transport is not None and not self.transport.is_closing():
            self._unread = False
            self.transport.resume_reading()
        if self.link is not None:
            # The peer's TCP took what we had buffered: it is there, although the hub did
            # not read it meanwhile (pause_writing paused our reading).
            self.link.heard()
            if self.link.session.bytes_to_send:
                self.flush()  # the next batches of what waits in the session's lanes
        self._wake_writers()

    def _wake_writers(self) -> None:
        if self._writable is not None:
            _done(self._writable)
            self._writable = None

    @property
    def writing_paused(self) -> bool:
        """True while the transport's write buffer is over its high-water mark."""
        return self._paused and not self.lost.done()

    async def wait_writable(self) -> None:
        """Wait until the write buffer next drains below its low-water mark, or the end
        (the link then checks its lanes again: the flush at the resume may pause anew)."""
        if self.writing_paused:
            if self._writable is None:
                self._writable = self._loop.create_future()
            await asyncio.shield(self._writable)

    async def aclose(self, timeout: float) -> None:
        """Close the WebSocket (close frame, then TLS and TCP); abort at ``timeout``."""
        deadline = self._loop.time() + timeout
        try:
            link = self.link
            if link is not None:  # everything, e.g. the session's close after its bulk
                frames = link.session.frames_to_send()
                if frames:
                    self._send_frames(link, frames)
            ws = self._ws
            if ws.state is _OPEN and self.transport is not None:
                ws.send_close(_NORMAL_CLOSURE)
                self._send_pending()
            if not self.lost.done() and self.transport is not None:
                # The peer echoes our close frame (or sent its own); then TCP closes.
                await asyncio.wait_for(asyncio.shield(self._close_done), timeout)
                if not self.lost.done():
                    self.transport.close()  # TLS close_notify, then FIN
                    remaining = max(deadline - self._loop.time(), 0.0)
                    await asyncio.wait_for(asyncio.shield(self.lost), remaining)
        except (asyncio.TimeoutError, OSError):
            pass
        finally:
            if not self.lost.done():
                self.abort()
                try:
                    await asyncio.wait_for(asyncio.shield(self.lost), 0.1)
                except asyncio.TimeoutError:
                    _done(self.lost)


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
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    where = f"wss://{netloc}{PATH}"
    try:
        uri = parse_uri(where)
    except InvalidURI as exc:
        raise ConnectFailed(f"{where}: {exc}") from exc
    conn = _WebSocketConnection(
        ClientProtocol(uri, max_size=_max_message(config)),
        context,
        where=where,
        server_hostname=server_name or host,
        handshake_timeout=timeout,
    )

    async def open_connection() -> None:
        await loop.create_connection(lambda: conn, host, port)
        await conn.opened

    try:
        await asyncio.wait_for(open_connection(), timeout)
    except asyncio.TimeoutError:
        conn.abort()
        raise HandshakeTimeout(
            f"{where}: not connected within {timeout} s", timeout=timeout
        ) from None
    except OSError as exc:
        conn.abort()
        raise ConnectFailed(f"{where}: {exc}") from exc
    except BaseException:
        conn.abort()
        raise
    link = Link(
        "websocket",
        Session(role=Role.CLIENT, config=config, now=loop.time(), next_seq=next_seq),
        peer_node_name=None,
    )
    conn.attach(link)
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
