"""A ``Link``: one protocol session over one transport connection, for applications.

The transport adapters (``quic.py``, ``websocket.py``) only move bytes; the rules live in
the sans-I/O :class:`protocol.session.Session`. A link joins the two with the short loop of
STYLE.md §2: bytes in → ``session.receive_data`` → drain events → write
``session.data_to_send()`` → re-arm one timer. Applications see the same interface whatever
the transport:

- ``await link.send(message)`` queues a message, waiting while the window is full;
- ``async for event in link`` yields session events until the link is closed;
- ``await link.close(code, reason)`` returns within ``close_bound`` seconds, whatever the
  peer or the network does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from protocol.errors import CloseCode, ConnectionClosed, StateError, WindowFull
from protocol.events import Acked, Closed, Established, HelloReceived, MessageReceived
from protocol.session import Session, SessionState

if TYPE_CHECKING:
    from cryptography import x509

    from protocol.messages import Hello, Message, Welcome

__all__ = ["TRANSPORT_CLOSE_BOUND", "Link", "handshake_failure"]

logger = logging.getLogger(__name__)

SEND_AHEAD = 1024 * 1024
"""Bytes the session's lanes may hold, while the transport is paused, before ``send()``
waits (a sender's memory bound; the lanes order what waits, control first)."""

TRANSPORT_CLOSE_BOUND = 1.0
"""Seconds a transport gets to close cleanly (QUIC CONNECTION_CLOSE, WebSocket close frame)
after the session has ended, before it is aborted."""


def handshake_failure(opened: Any, where: str) -> Exception:
    """The error a dialer raises when the session ended before its welcome arrived.

    Args:
        opened: what the session gave instead of ``Established`` (a ``Closed`` event, or
            anything else when the connection ended without one).
        where: ``host:port``, for the message.

    Returns:
        ``SessionRejected`` when the hub closed the session (with its code, reason and
        retry-after), else ``ConnectFailed``.
    """
    from protocol.transport.errors import ConnectFailed, SessionRejected

    if isinstance(opened, Closed):
        if opened.code == CloseCode.PEER_DEAD:
            return ConnectFailed(f"{where}: no answer to our hello")
        if opened.code == CloseCode.CONNECTION_LOST:
            return ConnectFailed(f"{where}: the connection closed during the session handshake")
        return SessionRejected(opened.code, opened.reason, opened.retry_after)
    return ConnectFailed(f"{where}: the connection closed during the session handshake")


class _Backend(Protocol):
    """What a link needs from its transport adapter."""

    writing_paused: bool
    """True while the transport's write buffer is over its high-water mark."""

    def data_ready(self) -> None:
        """The session has bytes to send; never blocks.

        The adapter takes them (``data_to_send()`` or ``frames_to_send()``) at the end of
        this event-loop iteration, so that everything made in one iteration leaves
        together, or at once if much is waiting."""

    async def wait_writable(self) -> None:
        """Wait until ``writing_paused`` is False (or the transport has ended)."""

    async def aclose(self, timeout: float) -> None:
        """Close the transport, cleanly if it can within ``timeout`` s, else abort it."""


class Link:
    """One session over one QUIC or WebSocket connection.

    Made by ``connect_quic``/``connect_websocket`` (client, returned once the session is
    established) or by ``serve_quic``/``serve_websocket`` (server, handed to the handler
    once the peer's hello has arrived). Use it as an async context manager, or call
    :meth:`close`, so that nothing outlives the connection.

    Attributes:
        transport: ``"quic"`` or ``"websocket"``.
        peer_node_name: on the hub, the node named by the client certificate (verified
            against the hub CA); on the agent, ``None``.
        peer_certificate: on the hub, that verified client certificate (a ``cryptography``
            ``x509.Certificate``: its serial number is what revocation checks); on the
            agent, ``None``.
    """

    def __init__(
        self,
        transport: str,
        session: Session,
        *,
        peer_node_name: str | None,
        peer_certificate: x509.Certificate | None = None,
    ) -> None:
        self.transport = transport
        self.peer_node_name = peer_node_name
        self.peer_certificate = peer_certificate
        self._session = session
        self._loop = asyncio.get_running_loop()
        self._backend: _Backend | None = None
        self._events: deque[Any] = deque()
        # Woken when events arrive: a bare future from our loop (asyncio.Event.wait() looks
        # the running loop up on every wait, a getpid() system call on Python 3.11).
        self._event_waiter: asyncio.Future[None] | None = None
        self._window_open = asyncio.Event()
        self._room_waiters: list[tuple[int, object, asyncio.Future[None]]] = []
        self._ended = asyncio.Event()
        self._opened: asyncio.Future[Any] = self._loop.create_future()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._close_event: Closed | None = None
        self._closing_task: asyncio.Task[None] | None = None
        self.close_bound = session.config.close_timeout + TRANSPORT_CLOSE_BOUND + 0.5
        """Seconds within which :meth:`close` returns."""
        self.bytes_in = 0
        """Protocol bytes received from the peer (frames, length prefixes included)."""
        self.bytes_out = 0
        """Protocol bytes handed to the transport for the peer."""

    # -- for the adapters -------------------------------------------------------------------

    def attach(self, backend: _Backend) -> None:
        """Give the link its transport (adapters call this once, before any data)."""
        self._backend = backend

    def now(self) -> float:
        """The link's clock: the event loop's monotonic time, seconds."""
        return self._loop.time()

    def data_received(self, data: bytes) -> None:
        """Feed bytes that arrived from the peer (adapters call this)."""
        session = self._session
        if session.state is SessionState.CLOSED:
            return
        self.bytes_in += len(data)
        session.receive_data(data, self._loop.time())
        self._pump()

    def taken(self) -> None:
        """The transport took bytes from the session (adapters call it after each take):
        wake the :meth:`wait_room` callers whose bound the lanes are now under."""
        waiters = self._room_waiters
        if waiters:
            session = self._session
            keep = []
            for bound, flow, waiter in waiters:
                queued = session.bytes_to_send if flow is None else session.flow_bytes(flow)
                if queued <= bound or self._ended.is_set():
                    if not waiter.done():
                        waiter.set_result(None)
                elif not waiter.done():
                    keep.append((bound, flow, waiter))
            self._room_waiters = keep

    async def wait_room(self, max_bytes: int, flow: object = None) -> None:
        """Wait until the session's lanes hold at most ``max_bytes`` bytes the transport
        has not taken yet (or the link has ended); with a ``flow`` (a day-2 stream's id),
        only that flow's bytes in the BULK lane count.

        A bulk sender that waits here before each message keeps its own queue short;
        the BULK lane's flows take turns (``protocol.chunking.SendQueue``), so what
        another stream sends after it (an exec's echo beside a followed log) waits behind
        at most one of its messages, whatever the flow-control windows let it have in
        flight.
        """
        session = self._session
        queued = session.bytes_to_send if flow is None else session.flow_bytes(flow)
        if queued <= max_bytes or self._ended.is_set():
            return
        waiter = self._loop.create_future()
        self._room_waiters.append((max_bytes, flow, waiter))
        await waiter

    def heard(self) -> None:
        """The transport read bytes from the peer that may not make a frame yet (a large
        WebSocket message on a slow link, a QUIC packet of acks): the peer is alive.
        Adapters call it per read; it costs a clock read and a store."""
        self._session.heard(self._loop.time())

    def connection_lost(self, reason: str) -> None:
        """Tell the link its transport has ended (adapters call this).

        The session ends with ``Closed(CONNECTION_LOST)`` unless it had already ended.
        """
        if self._session.state is not SessionState.CLOSED:
            logger.debug("%s transport ended: %s", self.transport, reason)
            self._session.receive_eof(self.now())
            self._pump()
        self._finish()

    # -- the loop ---------------------------------------------------------------------------

    def _pump(self) -> None:
        session = self._session
        events = session.events_received()
        if events:
            for event in events:
                if event.__class__ is MessageReceived:  # the common case, first
                    self._events.append(event)
                else:
                    self._dispatch(event)
            self._wake()
        if session.bytes_to_send and self._backend is not None:
            self._backend.data_ready()
        if session.state is SessionState.CLOSED:
            self._finish()
        else:
            self._arm_timer(session.get_timer())

    def _wake(self) -> None:
        waiter = self._event_waiter
        if waiter is not None:
            self._event_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _dispatch(self, event: Any) -> None:
        if isinstance(event, Acked):
            self._window_open.set()
        elif isinstance(event, (Established, HelloReceived)):
            if not self._opened.done():
                self._opened.set_result(event)
            return  # consumed by the handshake, not by the application
        elif isinstance(event, Closed):
            self._close_event = event
            if not self._opened.done():
                self._opened.set_result(event)
        self._events.append(event)

    def _arm_timer(self, deadline: float | None) -> None:
        # Re-arm only when the deadline moves earlier: every packet pushes the deadlines
        # later, and moving a timer per packet costs more than one early wake-up, which
        # handle_timer() takes harmlessly (it re-arms for the real deadline).
        if deadline is not None and self._timer_at is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = None if deadline is None else self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self._session.state is not SessionState.CLOSED:
            self._session.handle_timer(self.now())
            self._pump()

    def _finish(self) -> None:
        """The session is CLOSED: stop the timer, wake everyone, close the transport."""
        if self._ended.is_set():
            return
        self._ended.set()
        self._arm_timer(None)
        self._window_open.set()
        self.taken()  # room waiters: the link is over
        self._wake()
        if not self._opened.done():
            self._opened.set_result(None)
        if self._backend is not None and self._closing_task is None:
            # Owned by the link: close() awaits it; it ends within TRANSPORT_CLOSE_BOUND.
            self._closing_task = self._loop.create_task(
                self._backend.aclose(TRANSPORT_CLOSE_BOUND), name=f"{self.transport}-close"
            )

    # -- handshake (used by the adapters) ---------------------------------------------------

    async def wait_opened(self, timeout: float) -> Any:
        """Wait for ``Established``/``HelloReceived``; ``None`` or a close event on failure.

        Raises:
            TimeoutError: nothing decisive within ``timeout`` seconds.
        """
        return await asyncio.wait_for(asyncio.shield(self._opened), timeout)

    def start_client(self, hello: Hello, pending: Iterable[tuple[int, Message]]) -> None:
        """Send the hello (client side; adapters call this once the transport is up).

        Raises:
            protocol.errors.UsageError: ``pending`` is not in increasing seq order below
                the session's ``next_seq``, or holds a kind that needs no ack.
        """
        self._session.connect(hello, self.now(), pending=list(pending))
        self._pump()

    # -- application API --------------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The sans-I/O session (read its ``state``, ``unacked()``; do not feed it)."""
        return self._session

    @property
    def hello(self) -> Hello | None:
        """Server side: the peer's hello (after the handler is called)."""
        result = self._opened.result() if self._opened.done() else None
        return result.hello if isinstance(result, HelloReceived) else None

    @property
    def version(self) -> int | None:
        """The negotiated protocol version (server: chosen from the hello; client: the
        welcome's), once known."""
        result = self._opened.result() if self._opened.done() else None
        if isinstance(result, HelloReceived):
            return result.version
        if isinstance(result, Established):
            return result.welcome.version
        return None

    @property
    def welcome(self) -> Welcome | None:
        """Client side: the hub's welcome."""
        result = self._opened.result() if self._opened.done() else None
        return result.welcome if isinstance(result, Established) else None

    @property
    def closed(self) -> bool:
        """True once the session has ended (for any reason)."""
        return self._ended.is_set()

    @property
    def close_event(self) -> Closed | None:
        """How the session ended, once it has (code ``PEER_DEAD`` after a ``PeerDead``,
        ``CONNECTION_LOST`` if the transport ended without a close)."""
        return self._close_event

    def accept(self, welcome: Welcome) -> None:
        """Server side: accept the peer's hello with this welcome.

        Raises:
            protocol.errors.StateError: the session is not waiting for an answer.
        """
        self._session.accept(welcome, self.now())
        self._pump()

    def reject(self, code: CloseCode, reason: str, *, retry_after: float | None = None) -> None:
        """Server side: refuse the peer's hello (``UNAUTHORIZED``, ``OVERLOADED`` with a
        ``retry_after`` in seconds...); the link then closes."""
        self._session.reject(code, reason, self.now(), retry_after=retry_after)
        self._pump()

    def release(self, up_to: int) -> None:
        """``manual_ack`` sessions: the peer's messages up to seq ``up_to`` are processed;
        acknowledge them (within the session's ``ack_delay``). Does nothing once closed.

        Raises:
            protocol.errors.UsageError: the session is not in ``manual_ack`` mode, or
                ``up_to`` is beyond what it has received.
        """
        if self._ended.is_set():
            return
        self._session.release(up_to, self.now())
        self._pump()

    def _raise_closed(self) -> None:
        event = self._close_event
        if event is not None:
            raise ConnectionClosed(event.code, event.reason, event.by_peer, event.retry_after)
        raise ConnectionClosed(CloseCode.CONNECTION_LOST, "link closed", True)

    async def send(self, message: Message) -> int | None:
        """Queue a message for the peer, waiting while the unacknowledged window is full.

        The message leaves with everything else sent in the same event-loop iteration, at
        its end, in its lane's order (``protocol.chunking``). While the transport's write
        buffer is over its high-water mark and the lanes hold more than ``SEND_AHEAD``
        bytes, the call waits (back-pressure).

        Returns:
            The message's sequence number if it needs an ack, else ``None``.

        Raises:
            protocol.errors.ConnectionClosed: the link is closed, or closes while waiting.
        """
        session = self._session
        while True:
            if self._ended.is_set():
                self._raise_closed()
            try:
                seq = session.send(message, self._loop.time())
                break
            except WindowFull:
                self._window_open.clear()
                await self._window_open.wait()
            except StateError:
                if session.state not in (SessionState.CLOSING, SessionState.CLOSED):
                    raise
                # Our close is out and the peer's not yet in: closed for sending.
                raise ConnectionClosed(CloseCode.GOING_AWAY, "link closing", False) from None
        # send() makes a frame and nothing else: no events, and a timer that can only move
        # later (handled lazily), so no pump. The transport coalesces what is written in
        # one loop iteration (one round of QUIC datagrams, one WebSocket message).
        backend = self._backend
        if backend is not None:
            backend.data_ready()
            # Back-pressure: while the transport is paused and the session's lanes hold
            # more than SEND_AHEAD, wait (what is queued still leaves in lane order).
            while (
                backend.writing_paused
                and session.bytes_to_send > SEND_AHEAD
                and not self._ended.is_set()
            ):
                await backend.wait_writable()
        return seq

    def __aiter__(self) -> Link:
        return self

    async def __anext__(self) -> Any:
        """The next session event: ``MessageReceived``, ``Acked``, ``PeerError``,
        ``PeerDead``, and last ``Closed``; then the iteration stops."""
        while not self._events:
            if self._ended.is_set():
                raise StopAsyncIteration
            waiter = self._event_waiter
            if waiter is None or waiter.done():  # done: a cancelled earlier wait
                waiter = self._event_waiter = self._loop.create_future()
            await waiter
        return self._events.popleft()

    async def close(
        self,
        code: CloseCode = CloseCode.NORMAL,
        reason: str = "",
        *,
        retry_after: float | None = None,
    ) -> None:
        """Close the session and the transport; returns within :attr:`close_bound` seconds.

        Sends ``close`` (with ``retry_after``, seconds the peer should wait before it dials
        again, if given), waits up to the session's ``close_timeout`` for the peer's
        ``close`` (a ping in flight or a stuck send does not delay it), then closes the
        transport, aborting it if it does not close within ``TRANSPORT_CLOSE_BOUND``.
        Idempotent.

        Raises:
            protocol.errors.InvalidMessage: ``code`` or ``reason`` cannot go in a ``close``.
        """
        if not self._ended.is_set():
            try:
                self._session.close(code, reason, self.now(), retry_after=retry_after)
            except StateError:  # a state the session cannot close from: just end it
                logger.debug("session refused close(); ending the link", exc_info=True)
                self.connection_lost("closed locally")
            else:
                self._pump()
            try:
                await asyncio.wait_for(self._ended.wait(), self._session.config.close_timeout)
            except asyncio.TimeoutError:
                self.connection_lost("close timed out")
        self._finish()
        await self._transport_closed()

    async def _transport_closed(self) -> None:
        # Not shielded: whoever gives up waiting (cancellation) turns the clean transport
        # close into an abort, so that nothing outlives the link.
        if self._closing_task is not None:
            await self._closing_task

    async def wait_closed(self) -> None:
        """Wait until the link has ended and its transport is closed."""
        await self._ended.wait()
        await self._transport_closed()

    async def __aenter__(self) -> Link:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
