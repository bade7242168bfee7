"""QUIC transport (aioquic), client and server, with mutual TLS.

aioquic's ``QuicConnection`` is sans-I/O like our ``Session``, so this adapter drives both
directly, without aioquic's stream-reader layer: a datagram in → ``quic.receive_datagram``
→ drain QUIC events → stream bytes to the link's session → session bytes to QUIC stream 0 →
``quic.datagrams_to_send()`` to the socket → re-arm the QUIC timer. No task runs per
connection; everything happens in the datagram and timer callbacks.

Frames go back to back on one bidirectional stream (stream 0, opened by the client), as
docs/protocol.md says.

Client certificates: aioquic has no public switch to request one (aiortc/aioquic#541) and
does not verify one on the server side. We set the TLS context's
``_request_client_certificate`` flag right after aioquic creates it
(:class:`_MutualTLSServerConnection`), and verify the presented chain ourselves with
``protocol.pki.verify_node_certificate`` when the handshake completes, before any stream
data reaches a session; a connection whose certificate is missing or rejected is closed with
the TLS alert as QUIC crypto error (``certificate_required``, ``bad_certificate``). Both
private names are read in this module only, and the rejection tests fail if aioquic
changes them.

Acknowledgement delay: aioquic acknowledges a 1-RTT packet 1 ms after it arrives, unless
the ACK can ride on data already due, so under load nearly every millisecond of traffic
costs each side an ACK-only packet, and every packet is tens of microseconds of pure-Python
work on both ends (measured, 64 messages of 1 KiB in flight: one ACK-only packet for every
five messages). Once the handshake is done we set the connection's ``_ack_delay`` (no
public setting) to ``ACK_DELAY``, 5 ms: well inside the 25 ms ``max_ack_delay`` aioquic
advertises (RFC 9000 section 13.2.1), so the peer's loss detection already allows for it,
and one ACK then covers five times as many packets (measured: -13% client instructions
per echoed message). Handshake packets keep aioquic's prompt acknowledgement, as
RFC 9000 asks. A test fails if aioquic renames the attribute.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aioquic.buffer import Buffer
from aioquic.quic import events as qe
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import (
    QuicPacketType,
    encode_quic_version_negotiation,
    pull_quic_header,
)

from protocol import pki
from protocol.config import SessionConfig
from protocol.events import Established
from protocol.session import Role, Session
from protocol.transport import pacing, quicalerts
from protocol.transport.admission import serve_link, server_link, shut_down
from protocol.transport.datagrams import LOOPBACK_DATAGRAM_SIZE as LOOPBACK_SIZE
from protocol.transport.datagrams import MAX_DATAGRAM_SIZE, datagram_size
from protocol.transport.errors import CertificateRejected, ConnectFailed, HandshakeTimeout
from protocol.transport.link import Link
from protocol.transport.link import handshake_failure as _rejection
from protocol.transport.tls import PEMCredentials, TLSCredentials, tls_credentials
from protocol.transport.udp import UDPSocket, open_udp

if TYPE_CHECKING:
    from cryptography import x509

    from protocol.messages import Hello, Message

__all__ = ["ALPN", "QuicServer", "connect_quic", "quic_handshake_succeeds", "serve_quic"]

logger = logging.getLogger(__name__)

ALPN = "edgefleet/1"
"""The ALPN protocol id both ends require."""

STREAM_ID = 0
"""The one bidirectional stream, opened by the client."""

# TLS alerts as QUIC crypto errors (RFC 9001 §4.8: 0x0100 + alert); an application close
_BAD_CERTIFICATE, _CERTIFICATE_REQUIRED, _APPLICATION_CLOSE = 0x100 + 42, 0x100 + 116, 0x0

ACK_DELAY = 0.005
"""Seconds before a received 1-RTT packet is acknowledged (aioquic's own: 0.001)."""

QUIC_AHEAD = 64 * 1024
"""Bytes of the session's status and bulk lanes handed to aioquic ahead of the wire: a
heartbeat or an ack waits behind at most this (plus one chunk), whatever is queued."""
_REFILLS = 16  # rounds of (take from the session, make datagrams) per transmit


def _configuration(
    credentials: TLSCredentials | PEMCredentials,
    *,
    is_client: bool,
    server_name: str | None,
    idle_timeout: float,
    max_datagram_size: int = MAX_DATAGRAM_SIZE,
) -> QuicConfiguration:
    credentials = tls_credentials(credentials)  # aioquic works on parsed certificates
    config = QuicConfiguration(
        is_client=is_client,
        alpn_protocols=[ALPN],
        server_name=server_name,
        cadata=credentials.ca_pem,
        idle_timeout=idle_timeout,
        max_datagram_size=max_datagram_size,
    )
    if credentials.chain:
        config.certificate = credentials.chain[0]
        config.certificate_chain = list(credentials.chain[1:])
        config.private_key = credentials.private_key
    return config


def _idle_timeout(config: SessionConfig) -> float:
    # Our session decides when the peer is dead (liveness_timeout); QUIC's own idle timer
    # is only a backstop that must not fire first.
    return config.liveness_timeout * 2


class _MutualTLSServerConnection(QuicConnection):
    """A server connection whose TLS handshake asks the client for a certificate."""

    def _initialize(self, peer_cid: bytes) -> None:
        super()._initialize(peer_cid)
        self.tls._request_client_certificate = True  # no public API, see module docstring


class _QuicEndpoint:
    """One QUIC connection bound to one link: the adapter loop."""

    def __init__(
        self,
        quic: QuicConnection,
        send: Callable[[list[bytes], Any], None],
        *,
        on_done: Callable[[_QuicEndpoint], None] | None = None,
        on_cid: Callable[[_QuicEndpoint, bytes, bool], None] | None = None,
    ) -> None:
        self.quic = quic
        pacing.install(quic)  # bursts that outlast a loop turn (protocol/transport/pacing.py)
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._transmit_scheduled = False
        self._transmit_needed = False
        self._on_done = on_done
        self._on_cid = on_cid
        self.link: Link | None = None
        self._early: list[qe.StreamDataReceived] = []
        self.handshake: asyncio.Future[None] = self._loop.create_future()
        self.terminated = asyncio.Event()
        self.termination: qe.ConnectionTerminated | None = None
        self.credentials: TLSCredentials | None = None  # set on the server: verify the client
        self.peer_node_name: str | None = None
        self.peer_certificate: x509.Certificate | None = None

    # bytes in
    def datagram_received(self, data: bytes, addr: Any) -> None:
        """One datagram of a batch: fed to aioquic; answered in :meth:`batch_done`."""
        self.quic.receive_datagram(data, addr, now=self._loop.time())
        if self.link is not None:
            self.link.heard()  # any packet counts as liveness (acks of our bulk, too)

    def batch_done(self) -> None:
        """The socket's ready datagrams were all fed: their events, then one transmit."""
        self._process()

    def _process(self) -> None:
        quic = self.quic
        while (event := quic.next_event()) is not None:
            if isinstance(event, qe.StreamDataReceived):
                if event.stream_id != STREAM_ID:
                    continue
                if self.link is None:  # not attached yet: keep it for the link
                    self._early.append(event)
                    continue
                if event.data:
                    self.link.data_received(event.data)
                if event.end_stream:
                    self.link.connection_lost("the peer ended the QUIC stream")
            elif isinstance(event, qe.HandshakeCompleted):
                self._handshake_completed()
            elif isinstance(event, qe.ConnectionTerminated):
                self._terminated(event)
            elif isinstance(event, qe.ConnectionIdIssued) and self._on_cid is not None:
                self._on_cid(self, event.connection_id, True)
            elif isinstance(event, qe.ConnectionIdRetired) and self._on_cid is not None:
                self._on_cid(self, event.connection_id, False)
        self.transmit()

    def attach(self, link: Link) -> None:
        """Bind the link: from now on stream 0 feeds its session."""
        self.link = link
        link.attach(self)
        early, self._early = self._early, []
        for event in early:
            if event.data:
                link.data_received(event.data)
            if event.end_stream:
                link.connection_lost("the peer ended the QUIC stream")

    def _handshake_completed(self) -> None:
        self.quic._ack_delay = ACK_DELAY  # no public setting, see module docstring
        if self.credentials is not None:  # server: verify the client certificate
            tls = self.quic.tls
            cert = tls._peer_certificate  # no public accessor, see module docstring
            if cert is None:
                self.quic.close(error_code=_CERTIFICATE_REQUIRED, reason_phrase="no certificate")
                return
            try:
                name = pki.verify_node_certificate(
                    cert,
                    cas=self.credentials.cas,
                    intermediates=tls._peer_certificate_chain,
                    now=time.time(),
                )
            except pki.PKIError as exc:
                self.quic.close(error_code=_BAD_CERTIFICATE, reason_phrase=str(exc)[:200])
                return
            self.peer_node_name = name
            self.peer_certificate = cert
        if not self.handshake.done():
            self.handshake.set_result(None)

    def _terminated(self, event: qe.ConnectionTerminated) -> None:
        if self.termination is None:
            self.termination = event
        if not self.handshake.done():
            self.handshake.set_exception(
                ConnectFailed(f"QUIC handshake failed: {quicalerts.describe(event)}")
            )
            self.handshake.exception()  # retrieved: nobody may be waiting any more
        if self.link is not None:
            self.link.connection_lost(
                f"QUIC connection closed: 0x{event.error_code:x} {event.reason_phrase}".rstrip()
            )
        self._arm(None)
        self.terminated.set()
        if self._on_done is not None:
            self._on_done(self)

    # bytes out
    writing_paused = False  # aioquic buffers stream data; the session's window bounds it

    def data_ready(self) -> None:
        """The link's session has bytes: take them at the end of this loop iteration."""
        self.schedule_transmit()

    async def wait_writable(self) -> None:  # pragma: no cover - never paused
        return

    def schedule_transmit(self) -> None:
        # The writes of one loop iteration: one round of datagrams (or none, if a
        # transmit() after a datagram or timer ran first).
        self._transmit_needed = True
        if not self._transmit_scheduled:
            self._transmit_scheduled = True
            self._loop.call_soon(self._scheduled_transmit)

    def _scheduled_transmit(self) -> None:
        self._transmit_scheduled = False
        if self._transmit_needed:
            self.transmit()

    def _unsent(self) -> int:
        """Bytes written to stream 0 that aioquic has not put in a packet yet."""
        stream = self.quic._streams.get(STREAM_ID)  # no public accessor (module docstring)
        if stream is None:
            return 0
        sender = stream.sender
        return sender._buffer_stop - sender.next_offset

    def _take_session_data(self, everything: bool = False) -> None:
        """The session's bytes → QUIC stream 0, in one write per round of datagrams:
        its control frames, then status and bulk while aioquic holds less than
        ``QUIC_AHEAD`` bytes unsent (so a heartbeat never waits behind more)."""
        link = self.link
        if link is not None and self.termination is None:
            budget = None if everything else max(0, QUIC_AHEAD - self._unsent())
            data = link.session.data_to_send(budget)
            if data:
                link.bytes_out += len(data)
                self.quic.send_stream_data(STREAM_ID, data)
                link.taken()

    def transmit(self) -> None:
        self._transmit_needed = False
        now = self._loop.time()
        link = self.link
        out: list[bytes] = []
        addr: Any = None
        for _ in range(_REFILLS):
            self._take_session_data()
            for data, to in self.quic.datagrams_to_send(now=now):
                if out and to != addr:  # a new path: what is gathered goes first
                    self._send(out, addr)
                    out = []
                out.append(data)
                addr = to
            # More of the session's lanes while the congestion window drained what we gave.
            if link is None or not link.session.bytes_to_send or self._unsent() > QUIC_AHEAD // 2:
                break
        if out:
            self._send(out, addr)  # one batch per connection and loop turn (udp.py)
        self._arm(self.quic.get_timer())

    def _arm(self, deadline: float | None) -> None:
        # Re-arm only for an earlier deadline: moving a timer per packet costs more than
        # one early wake-up (handle_timer() then re-arms for the real deadline).
        if deadline is not None and self._timer_at is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = None if deadline is None else self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        self.quic.handle_timer(now=self._loop.time())
        self._process()

    async def aclose(self, timeout: float) -> None:
        """Send CONNECTION_CLOSE; wait up to ``timeout`` s for it to go out, then drop."""
        try:
            if self.termination is None:
                self._take_session_data(everything=True)  # the session's close, before ours
                self.quic.close(error_code=_APPLICATION_CLOSE, reason_phrase="session closed")
                self.transmit()
                try:
                    await asyncio.wait_for(self.terminated.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._arm(None)
            if not self.terminated.is_set():
                self.terminated.set()
                if self._on_done is not None:
                    self._on_done(self)


class _ClientProtocol:
    """The client socket's receiver: everything goes to the one endpoint."""

    def __init__(self) -> None:
        self.endpoint: _QuicEndpoint | None = None

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.endpoint is not None:
            self.endpoint.datagram_received(data, addr)

    def batch_done(self) -> None:
        if self.endpoint is not None:
            self.endpoint.batch_done()


async def _client_socket(host: str, port: int) -> tuple[UDPSocket, _ClientProtocol]:
    protocol = _ClientProtocol()
    return await open_udp(protocol, remote=(host, port)), protocol


async def connect_quic(
    host: str,
    port: int,
    *,
    credentials: TLSCredentials | PEMCredentials,
    hello: Hello,
    pending: Iterable[tuple[int, Message]] = (),
    next_seq: int = 1,
    config: SessionConfig | None = None,
    server_name: str | None = None,
    timeout: float = 3.0,
    max_datagram_size: int = MAX_DATAGRAM_SIZE,
    loopback_datagram_size: int = LOOPBACK_SIZE,
) -> Link:
    """Dial the hub over QUIC and open a session.

    Args:
        host: hub address or name.
        port: hub UDP port.
        credentials: the hub CA to verify against and our node certificate.
        hello: our hello.
        pending: unacknowledged ``(seq, message)`` pairs from earlier sessions, resent
            after the welcome (minus those its ``received_up_to`` covers).
        next_seq: the next sequence number to assign (persisted by the caller).
        config: session settings; defaults if omitted.
        server_name: the name to verify the hub certificate against; ``host`` if omitted.
        timeout: seconds for the QUIC handshake and the hello/welcome exchange together
            (the dialer's short QUIC handshake timeout, 3 s by default).
        max_datagram_size: bytes per UDP datagram toward a hub off this host (see
            ``protocol.transport.datagrams``).
        loopback_datagram_size: bytes per datagram toward a hub at a loopback address
            (0: ``max_datagram_size``, for a local relay onto a real path).

    Returns:
        An established link (the welcome is in ``link.welcome``).

    Raises:
        HandshakeTimeout: no QUIC handshake or no welcome within ``timeout``.
        SessionRejected: the hub closed the session (version mismatch, unauthorized…).
        ConnectFailed: the address does not resolve, or the hub refused the connection
            or our certificate.
        UsageError: a datagram size out of 1,200..16,000 bytes.
    """
    config = config if config is not None else SessionConfig()
    datagram_size("", max_datagram_size, loopback_datagram_size)  # checked before opening
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        transport, protocol = await _client_socket(host, port)
    except OSError as exc:
        raise ConnectFailed(f"QUIC {host}:{port}: {exc}") from exc
    peer = transport.socket.getpeername()
    quic = QuicConnection(
        configuration=_configuration(
            credentials,
            is_client=True,
            server_name=server_name or host,
            idle_timeout=_idle_timeout(config),
            max_datagram_size=datagram_size(peer[0], max_datagram_size, loopback_datagram_size),
        )
    )
    # The socket closes when the connection has ended, for whatever reason.
    endpoint = _QuicEndpoint(
        quic, lambda datagrams, addr: transport.send(datagrams), on_done=lambda _: transport.close()
    )
    protocol.endpoint = endpoint
    link: Link | None = None
    try:
        quic.connect(transport.socket.getpeername(), now=loop.time())
        endpoint.transmit()
        try:
            await asyncio.wait_for(asyncio.shield(endpoint.handshake), deadline - loop.time())
        except asyncio.TimeoutError:
            raise HandshakeTimeout(
                f"QUIC handshake with {host}:{port} did not finish in {timeout} s",
                timeout=timeout,
            ) from None
        link = Link(
            "quic",
            Session(role=Role.CLIENT, config=config, now=loop.time(), next_seq=next_seq),
            peer_node_name=None,
        )
        endpoint.attach(link)
        link.start_client(hello, pending)
        try:
            opened = await link.wait_opened(max(deadline - loop.time(), 0.0))
        except asyncio.TimeoutError:
            raise HandshakeTimeout(
                f"no welcome from {host}:{port} within {timeout} s", timeout=timeout
            ) from None
        if not isinstance(opened, Established):
            termination = endpoint.termination
            if termination is not None and termination.error_code:
                where = f"QUIC {host}:{port}: {quicalerts.describe(termination)}"
                alert = quicalerts.alert(termination.error_code)
                if alert is not None:
                    # Our side of the handshake was done: this is the hub's verdict on
                    # our client certificate (it checks it after its own Finished).
                    raise CertificateRejected(where, alert=alert, reason=termination.reason_phrase)
                raise ConnectFailed(where)
            raise _rejection(opened, f"{host}:{port}")
    except BaseException:
        if link is not None:
            link.connection_lost("connect failed")
            await link.wait_closed()
        else:
            await endpoint.aclose(0)
        transport.close()
        raise
    return link


async def quic_handshake_succeeds(
    host: str,
    port: int,
    *,
    credentials: TLSCredentials | PEMCredentials,
    server_name: str | None = None,
    timeout: float = 3.0,
) -> bool:
    """Whether a QUIC handshake with the hub completes now (no session is opened).

    For a dialer on WebSocket deciding whether UDP works again, without running two
    sessions at once. The connection is closed right after the handshake.

    Args:
        host: hub address or name.
        port: hub UDP port.
        credentials: the hub CA and our node certificate.
        server_name: the name to verify the hub certificate against; ``host`` if omitted.
        timeout: seconds to wait for the handshake.

    Returns:
        True if the handshake completed within ``timeout``.
    """
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await _client_socket(host, port)
    except OSError:
        return False
    quic = QuicConnection(
        configuration=_configuration(
            credentials, is_client=True, server_name=server_name or host, idle_timeout=timeout
        )
    )
    endpoint = _QuicEndpoint(
        quic, lambda datagrams, addr: transport.send(datagrams), on_done=lambda _: transport.close()
    )
    protocol.endpoint = endpoint
    try:
        quic.connect(transport.socket.getpeername(), now=loop.time())
        endpoint.transmit()
        await asyncio.wait_for(asyncio.shield(endpoint.handshake), timeout)
        return True
    except (asyncio.TimeoutError, ConnectFailed):
        return False
    finally:
        await endpoint.aclose(0.2)
        transport.close()


# -- server ---------------------------------------------------------------------------------

Handler = Callable[[Link], Awaitable[None]]


class QuicServer:
    """A QUIC listener: one UDP socket, connections told apart by connection id.

    Made by :func:`serve_quic`. Each accepted connection whose client certificate verifies
    and whose hello arrives within ``hello_timeout`` is handed to the handler as a
    :class:`Link`; the link is closed when the handler returns. Close the server with
    ``await server.aclose()`` (or ``async with``): it stops accepting, closes every link
    and waits for every handler.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        credentials: TLSCredentials,
        config: SessionConfig,
        hello_timeout: float,
        max_datagram_size: int = MAX_DATAGRAM_SIZE,
        loopback_datagram_size: int = LOOPBACK_SIZE,
    ) -> None:
        self._handler = handler
        self._credentials = credentials
        self._config = config
        self._hello_timeout = hello_timeout
        self._max_datagram_size = max_datagram_size
        self._loopback_datagram_size = loopback_datagram_size
        self._quic_config = _configuration(
            credentials,
            is_client=False,
            server_name=None,
            idle_timeout=_idle_timeout(config),
            max_datagram_size=max_datagram_size,
        )
        self._endpoints: dict[bytes, _QuicEndpoint] = {}
        self._links: set[Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._transport: UDPSocket | None = None
        self._touched: dict[int, _QuicEndpoint] = {}  # fed in this batch, not yet answered
        self._closing = False

    def connection_made(self, transport: UDPSocket) -> None:
        self._transport = transport

    def set_credentials(self, credentials: TLSCredentials) -> None:
        """Serve new connections with ``credentials`` (a reissued or rotated certificate,
        or a new CA bundle for client certificates); open connections keep theirs.

        Raises:
            TransportError: the credentials carry no server certificate.
        """
        from protocol.transport.errors import TransportError

        if not credentials.chain:
            raise TransportError("a TLS server needs a certificate chain and key")
        config = _configuration(
            credentials,
            is_client=False,
            server_name=None,
            idle_timeout=_idle_timeout(self._config),
            max_datagram_size=self._max_datagram_size,
        )
        self._credentials, self._quic_config = credentials, config

    @property
    def port(self) -> int:
        """The UDP port the server listens on."""
        assert self._transport is not None
        return self._transport.sockname[1]

    @property
    def receive_buffer(self) -> int:
        """The UDP socket's receive buffer as the kernel reports it (``SO_RCVBUF``, bytes;
        Linux reports twice what it holds for data, its bookkeeping included)."""
        assert self._transport is not None
        sock = self._transport.socket
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)

    @property
    def connections(self) -> int:
        """Connections currently held (handshaking or open)."""
        return len({id(e) for e in self._endpoints.values()})

    def datagram_received(self, data: bytes, addr: Any) -> None:
        try:
            header = pull_quic_header(
                Buffer(data=data), host_cid_length=self._quic_config.connection_id_length
            )
        except ValueError:
            return
        endpoint = self._endpoints.get(header.destination_cid)
        if endpoint is None:
            if (
                header.version is not None
                and header.packet_type != QuicPacketType.VERSION_NEGOTIATION
                and header.version not in self._quic_config.supported_versions
            ):
                negotiation = encode_quic_version_negotiation(
                    source_cid=header.destination_cid,
                    destination_cid=header.source_cid,
                    supported_versions=self._quic_config.supported_versions,
                )
                self._transport.send([negotiation], addr)
                return
            if self._closing or header.packet_type != QuicPacketType.INITIAL or len(data) < 1200:
                return
            endpoint = self._accept(header.destination_cid, addr)
        endpoint.datagram_received(data, addr)
        self._touched[id(endpoint)] = endpoint

    def batch_done(self) -> None:
        """The socket's ready datagrams were fed: each connection answers once."""
        touched, self._touched = self._touched, {}
        for endpoint in touched.values():
            endpoint.batch_done()

    def _accept(self, original_cid: bytes, addr: Any) -> _QuicEndpoint:
        configuration = self._quic_config
        size = datagram_size(addr[0], self._max_datagram_size, self._loopback_datagram_size)
        if size != configuration.max_datagram_size:  # a peer on this host (datagrams.py)
            configuration = dataclasses.replace(configuration, max_datagram_size=size)
        quic = _MutualTLSServerConnection(
            configuration=configuration, original_destination_connection_id=original_cid
        )
        endpoint = _QuicEndpoint(quic, self._transport.send, on_done=self._forget, on_cid=self._cid)
        endpoint.credentials = self._credentials
        self._endpoints[original_cid] = endpoint
        self._endpoints[quic.host_cid] = endpoint
        task = asyncio.get_running_loop().create_task(self._serve(endpoint), name="quic-conn")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return endpoint

    def _cid(self, endpoint: _QuicEndpoint, cid: bytes, issued: bool) -> None:
        if issued:
            self._endpoints[cid] = endpoint
        elif self._endpoints.get(cid) is endpoint:
            del self._endpoints[cid]

    def _forget(self, endpoint: _QuicEndpoint) -> None:
        for cid in [c for c, e in self._endpoints.items() if e is endpoint]:
            del self._endpoints[cid]

    async def _serve(self, endpoint: _QuicEndpoint) -> None:
        """One connection: handshake, hello, handler, close (owned by the server)."""
        link: Link | None = None
        try:
            try:
                await asyncio.wait_for(asyncio.shield(endpoint.handshake), self._hello_timeout)
            except (asyncio.TimeoutError, ConnectFailed):
                return
            link = server_link(
                "quic",
                self._config,
                peer_node_name=endpoint.peer_node_name,
                peer_certificate=endpoint.peer_certificate,
            )
            endpoint.attach(link)
            self._links.add(link)
            await serve_link(link, self._handler, self._hello_timeout, logger)
        finally:
            if link is not None:
                self._links.discard(link)
                await link.close()
            await endpoint.aclose(0.5)

    async def aclose(self, retry_after: Callable[[], float | None] | None = None) -> None:
        """Stop accepting, close every link (bounded) and wait for every handler.

        Args:
            retry_after: ``() -> seconds`` drawn for each link's ``GOING_AWAY`` (see
                :func:`protocol.transport.admission.shut_down`), or ``None``.
        """
        self._closing = True
        await shut_down(self._links, self._tasks, retry_after)
        if self._transport is not None:
            self._transport.close()

    async def __aenter__(self) -> QuicServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def serve_quic(
    handler: Handler,
    host: str,
    port: int,
    *,
    credentials: TLSCredentials,
    config: SessionConfig | None = None,
    hello_timeout: float = 10.0,
    receive_buffer: int = 0,
    max_datagram_size: int = MAX_DATAGRAM_SIZE,
    loopback_datagram_size: int = LOOPBACK_SIZE,
) -> QuicServer:
    """Listen for agents over QUIC.

    Args:
        handler: coroutine called with each link once its hello has arrived (read
            ``link.hello`` and ``link.peer_node_name``, then ``link.accept(welcome)`` or
            ``link.reject(code, reason)``); the link is closed when it returns.
        host: address to bind (``"::"`` for every address).
        port: UDP port (0 picks a free one: read ``server.port``).
        credentials: the hub CA and the hub's server certificate and key.
        config: session settings; defaults if omitted.
        hello_timeout: seconds a new connection has to finish the QUIC handshake, and
            then again to send its hello.
        receive_buffer: bytes of UDP receive buffer to ask for (``SO_RCVBUF``), so that a
            burst of handshakes arriving while the loop is busy waits in the kernel instead
            of being dropped; the kernel grants at most ``net.core.rmem_max``
            (:attr:`QuicServer.receive_buffer` says what it granted). 0: the OS default.
        max_datagram_size: bytes per UDP datagram toward agents off this host (see
            ``protocol.transport.datagrams``).
        loopback_datagram_size: bytes per datagram toward agents at a loopback address
            (0: ``max_datagram_size``, for agents behind a local relay).

    Returns:
        The running server.

    Raises:
        TransportError: the address cannot be bound.
        UsageError: a datagram size out of 1,200..16,000 bytes.
    """
    from protocol.transport.errors import TransportError

    config = config if config is not None else SessionConfig()
    datagram_size("", max_datagram_size, loopback_datagram_size)  # checked before opening
    server = QuicServer(
        handler,
        credentials=credentials,
        config=config,
        hello_timeout=hello_timeout,
        max_datagram_size=max_datagram_size,
        loopback_datagram_size=loopback_datagram_size,
    )
    try:
        udp = await open_udp(server, local=(host, port))
    except OSError as exc:
        raise TransportError(f"cannot listen on udp {host}:{port}: {exc}") from exc
    server.connection_made(udp)
    if receive_buffer > 0:
        with contextlib.suppress(OSError):  # "where the OS allows": capped, never fatal
            udp.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    return server
