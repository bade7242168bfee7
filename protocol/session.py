"""The sans-I/O session: the rules of docs/protocol.md as a state machine.

Like ``h11.Connection``, ``websockets.protocol.Protocol`` and
``aioquic.quic.connection.QuicConnection``, a ``Session`` never touches a socket, reads a
clock or draws a random number. The transport adapter feeds it bytes with the time, drains
the events and the bytes to send, and re-arms one timer::

    session.receive_data(data, now)      # or receive_eof(now) when the stream ended
    for event in session.events_received(): ...
    transport.write(session.data_to_send())
    deadline = session.get_timer()       # call handle_timer(now) at or after it

The rules (handshake, numbering, resend, liveness, close) and the one table of legal
transitions are in :mod:`protocol.states`; this module is the engine that applies them.
"""

from __future__ import annotations

from dataclasses import replace

from protocol.chunking import ChunkRefused, Limits, Reassembler, SendQueue, agree_limits
from protocol.codec import HEADER_SIZE, FrameDecoder, decode_payload, encode
from protocol.config import DEFAULT_CONFIG, SessionConfig
from protocol.errors import (
    CloseCode,
    DecodeError,
    ErrorCode,
    MessageTooLarge,
    StateError,
    UnknownKind,
    UsageError,
    VersionMismatch,
    WindowFull,
)
from protocol.events import (
    Acked,
    Closed,
    Established,
    HelloReceived,
    MessageReceived,
    PeerDead,  # noqa: F401 - raised by protocol.timers; importable from here as before
    PeerError,
    Refused,
    SendFailed,
    SessionEvent,
)
from protocol.messages import (
    MAX_SEQ,
    Ack,
    Chunk,
    Close,
    Error,
    Hello,
    Message,
    Pong,
    Priority,
    Welcome,
)
from protocol.states import (
    MOVES,
    REASON_LIMIT,
    TRANSITIONS,
    Role,
    SessionState,
    close_message,
    kinds_in,
    negotiate_version,
)
from protocol.timers import SessionTimers

# The events, SessionConfig and the states have their own modules (as in aioquic and h11);
# they stay importable from here for the code that imported them from protocol.session.
__all__ = [
    "TRANSITIONS",
    "Role",
    "Session",
    "SessionState",
    "negotiate_version",
]


# --- the session -------------------------------------------------------------------------------


class Session(SessionTimers):
    """One edge-hub session, with no I/O.

    Args:
        role: ``Role.CLIENT`` (edge) or ``Role.SERVER`` (hub).
        config: the tunables; ``SessionConfig()`` if ``None``.
        now: the current time (seconds, monotonic, the caller's clock); liveness starts here.
        next_seq: the seq our next numbered message gets. The edge persists it (or derives it
            from its outbox) so that seqs keep increasing across reconnects.

    Raises:
        UsageError: ``next_seq`` is not in 1..2**64-1.
    """

    __slots__ = (
        "_ack_deadline",
        "_acked_up_to",
        "_acks_awaited_since",
        "_acks_owed",
        "_close_code",
        "_close_deadline",
        "_close_reason",
        "_close_retry_after",
        "_decoder",
        "_events",
        "_hello_range",
        "_is_client",
        "_kinds_in",
        "_last_ping",
        "_last_received",
        "_last_sent",
        "_moves",
        "_next_seq",
        "_peer_limits",
        "_pending",
        "_ping_interval",
        "_ping_nonce",
        "_reassembler",
        "_received_up_to",
        "_released_up_to",
        "_sendq",
        "_state",
        "_unacked",
        "_version",
        "config",
        "role",
    )

    def __init__(
        self, role: Role, config: SessionConfig | None = None, *, now: float, next_seq: int = 1
    ) -> None:
        valid = isinstance(next_seq, int) and not isinstance(next_seq, bool)
        if not (valid and 1 <= next_seq <= MAX_SEQ):
            raise UsageError(f"next_seq must be in 1..2**64-1, got {next_seq!r}")
        self.role = role
        self.config = config = config if config is not None else DEFAULT_CONFIG
        self._is_client = role is Role.CLIENT
        self._kinds_in = kinds_in(role)
        self._state = SessionState.IDLE
        self._moves = MOVES[role][SessionState.IDLE]
        self._decoder = FrameDecoder(config.max_frame_size)
        # Whole frames under our own limit until the handshake agrees on the limits.
        self._sendq = SendQueue(Limits(config.max_frame_size, 0))
        self._reassembler: Reassembler | None = None  # made at the first chunk
        self._peer_limits = (0, 0)  # server: what the hello announced
        self._events: list[SessionEvent] = []
        # sending side
        self._next_seq = next_seq
        self._unacked: list[tuple[int, Message]] = []
        self._acked_up_to = 0
        # When the oldest message still unacknowledged was sent (None: nothing is): an ack
        # is an answer on its way, so the client does not ping while waiting for it.
        self._acks_awaited_since: float | None = None
        self._pending: list[tuple[int, Message, bytes]] = []  # client, until the welcome
        # receiving side
        self._received_up_to = 0
        self._released_up_to = 0  # manual_ack: what the application has processed
        self._acks_owed = 0
        self._ack_deadline: float | None = None
        # liveness
        self._last_received = now
        self._last_sent = now
        self._last_ping = now
        self._ping_interval = config.ping_interval
        self._ping_nonce = 0
        # handshake and close
        self._hello_range: tuple[int, int] | None = None
        self._version: int | None = None
        self._close_code = CloseCode.NORMAL
        self._close_reason = ""
        self._close_retry_after: float | None = None
        self._close_deadline: float | None = None

    # --- state ---------------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The current ``SessionState``."""
        return self._state

    @property
    def version(self) -> int | None:
        """The negotiated protocol version, once known."""
        return self._version

    @property
    def next_seq(self) -> int:
        """The seq the next numbered message will get (persist it on the edge)."""
        return self._next_seq

    @property
    def received_up_to(self) -> int:
        """The highest peer seq delivered (the hub persists it per node for the welcome)."""
        return self._received_up_to

    @property
    def acked_up_to(self) -> int:
        """The highest peer seq our acks cover (or will cover once the delayed ack goes
        out): ``received_up_to``, or with ``manual_ack`` what ``release()`` covered."""
        return self._released_up_to if self.config.manual_ack else self._received_up_to

    @property
    def pings_sent(self) -> int:
        """How many pings this session has sent (the client's liveness probes; always 0 on
        the server, which only answers them)."""
        return self._ping_nonce

    @property
    def bytes_to_send(self) -> int:
        """Bytes waiting in ``data_to_send()`` / ``frames_to_send()`` (a transport that
        defers its writes flushes once this grows large)."""
        return self._sendq.bytes

    @property
    def limits(self) -> Limits:
        """What we send: the frame and message limits (bytes) agreed at the handshake."""
        return self._sendq.limits

    def flow_bytes(self, flow: object) -> int:
        """Bytes of one flow of the BULK lane not yet taken by the transport (a day-2
        stream's, by its id: ``Message.flow_field``)."""
        return self._sendq.flow_bytes(flow)

    def backlog(self, priority: Priority) -> int:
        """Messages queued in one send lane and not yet taken by the transport (streams
        stop producing while their lane's backlog is above their bound)."""
        return self._sendq.backlog(priority)

    @property
    def window_free(self) -> int:
        """How many more numbered messages ``send()`` takes before ``WindowFull`` (>= 0)."""
        return max(0, self.config.window - len(self._unacked))

    def _go(self, event: str) -> SessionState:
        """Apply a local event from the table, or raise StateError."""
        to = self._moves.get(event)
        if to is None:
            raise StateError(self._state, event, self.role)
        if to is not self._state:
            self._state = to
            self._moves = MOVES[self.role][to]
        return to

    # --- outputs ---------------------------------------------------------------------------

    def events_received(self) -> list[SessionEvent]:
        """Drain the events that happened since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def data_to_send(self, max_bytes: int | None = None) -> bytes:
        """Drain the bytes to write to a stream transport (QUIC stream 0), frames back to
        back: every CONTROL frame, then STATUS and BULK frames and chunks up to about
        ``max_bytes`` (``None``: all; see ``protocol.chunking.SendQueue.pull``)."""
        out = self._sendq.pull(max_bytes)
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    def frames_to_send(self, max_bytes: int | None = None) -> list[bytes]:
        """Drain the frames as a list (to pack whole frames into WebSocket messages), as
        ``data_to_send(max_bytes)`` orders and bounds them."""
        return self._sendq.pull(max_bytes)

    def unacked(self) -> list[tuple[int, Message]]:
        """Everything sent with a seq and not yet acknowledged, in seq order.

        Persist it (or keep your outbox keyed by seq) and pass it to the next session's
        ``connect(pending=...)`` to resend.
        """
        return [*((seq, message) for seq, message, _ in self._pending), *self._unacked]

    def _queue(self, message: Message, seq: int | None, now: float) -> None:
        # Session control jumps every queue; a close leaves after what was said before it.
        if message.__class__ is Close:
            self._sendq.put_last(encode(message, seq))
        else:
            self._sendq.put(encode(message, seq), Priority.CONTROL)
        self._last_sent = now

    # --- client ----------------------------------------------------------------------------

    def connect(
        self, hello: Hello, now: float, pending: list[tuple[int, Message]] | tuple[()] = ()
    ) -> None:
        """Client: send ``hello``; then call ``data_to_send()`` and wait for ``Established``.

        Args:
            hello: our hello (version range, node name, inventory...).
            now: the current time (s).
            pending: ``(seq, message)`` pairs sent in earlier sessions and not known to be
                acknowledged, in increasing seq order, all below ``next_seq``. After the
                welcome, those at or below ``welcome.received_up_to`` are dropped (an
                ``Acked`` event reports them) and the rest are resent with their seqs,
                even beyond the window (``send()`` waits for room again).

        Raises:
            StateError: not a client, or not ``IDLE``.
            UsageError: ``hello`` is not a Hello, or ``pending`` is not as described.
            InvalidMessage: the hello or a pending message does not encode (nothing is sent).
        """
        if not isinstance(hello, Hello):
            raise UsageError(f"connect() takes a Hello, got {type(hello).__name__}")
        if (self.role, self._state, "connect") not in TRANSITIONS:
            raise StateError(self._state, "connect", self.role)
        checked: list[tuple[int, Message, bytes]] = []
        previous = 0
        config = self.config
        limit = max(config.max_frame_size, config.max_message_size)
        if not (hello.max_frame_size or hello.max_message_size):  # announce our limits
            hello = replace(
                hello,
                max_frame_size=config.max_frame_size,
                max_message_size=config.max_message_size,
            )
        for seq, message in pending:
            if not (isinstance(message, Message) and message.needs_ack):
                raise UsageError(f"pending seq {seq}: {type(message).__name__} needs no ack")
            if not (
                isinstance(seq, int)
                and not isinstance(seq, bool)
                and previous < seq < self._next_seq
            ):
                raise UsageError(
                    f"pending seqs must increase and stay below next_seq={self._next_seq}, "
                    f"got {seq!r} after {previous}"
                )
            # Encoded now, so that a bad one fails here rather than inside receive_data().
            checked.append((seq, message, encode(message, seq, limit)))
            previous = seq
        frame = encode(hello, None, config.max_frame_size)
        self._go("connect")
        self._pending = checked
        self._hello_range = (hello.min_version, hello.max_version)
        self._sendq.put(frame, Priority.CONTROL)
        self._last_sent = now

    def _on_welcome(self, welcome: Welcome, now: float) -> None:
        low, high = self._hello_range or (0, 0)
        if not low <= welcome.version <= high:
            reason = str(VersionMismatch((low, high), (welcome.version, welcome.version)))
            self._fail(
                CloseCode.VERSION_MISMATCH, f"the hub chose an unoffered version: {reason}", now
            )
            return
        self._go("recv_welcome")
        self._version = welcome.version
        # Adopt the hub's heartbeat, but never let it outlast our own liveness deadline.
        self._ping_interval = min(welcome.heartbeat_interval, self.config.liveness_timeout / 2)
        up_to = welcome.received_up_to
        if up_to >= self._next_seq:  # our store is older than the hub's memory of us
            self._next_seq = min(up_to + 1, MAX_SEQ)
        config = self.config
        sendq = self._sendq
        sendq.configure(
            agree_limits(
                config.max_frame_size,
                config.max_message_size,
                welcome.max_frame_size,
                welcome.max_message_size,
            )
        )
        self._events.append(Established(welcome))
        pending, self._pending = self._pending, []
        if pending and pending[0][0] <= up_to:
            self._acked_up_to = up_to
            self._events.append(Acked(up_to))
        for seq, message, frame in pending:
            if seq <= up_to:
                continue
            if sendq.fits(len(frame) - HEADER_SIZE):
                sendq.put(frame, Priority.STATUS, seq)
                self._unacked.append((seq, message))
            else:  # the hub takes less than we had encoded it for: it cannot go
                limit = sendq.limits.largest_message
                self._events.append(
                    SendFailed(seq, message, MessageTooLarge(message.kind, len(frame) - 4, limit))
                )
        if self._unacked:
            self._acks_awaited_since = now
        self._last_sent = now

    # --- server ----------------------------------------------------------------------------

    def _on_hello(self, hello: Hello, now: float) -> None:
        config = self.config
        try:
            version = negotiate_version(
                (config.min_version, config.max_version), (hello.min_version, hello.max_version)
            )
        except VersionMismatch as exc:
            self._fail(CloseCode.VERSION_MISMATCH, str(exc), now)
            return
        self._go("recv_hello")
        self._version = version
        self._peer_limits = (hello.max_frame_size, hello.max_message_size)
        self._events.append(HelloReceived(hello, version))

    def accept(self, welcome: Welcome, now: float) -> None:
        """Server: accept the hello; then call ``data_to_send()``.

        Args:
            welcome: the answer; ``version`` must be the one ``HelloReceived`` reported,
                ``received_up_to`` what the hub persisted for this node (0 if unknown:
                seqs at or below it are then dropped as duplicates), ``heartbeat_interval``
                below our ``liveness_timeout``.
            now: the current time (s).

        Raises:
            StateError: not a server, or no hello is waiting for an answer.
            UsageError: the welcome does not fit, as above.
        """
        if not isinstance(welcome, Welcome):
            raise UsageError(f"accept() takes a Welcome, got {type(welcome).__name__}")
        if self._state is SessionState.HELLO_RECEIVED:
            if welcome.version != self._version:
                raise UsageError(
                    f"welcome.version={welcome.version} but version {self._version} was negotiated"
                )
            if welcome.heartbeat_interval >= self.config.liveness_timeout:
                raise UsageError(
                    f"welcome.heartbeat_interval={welcome.heartbeat_interval} s must be below "
                    f"liveness_timeout={self.config.liveness_timeout} s"
                )
        self._go("accept")
        self._received_up_to = self._released_up_to = welcome.received_up_to
        limits = agree_limits(
            self.config.max_frame_size, self.config.max_message_size, *self._peer_limits
        )
        welcome = replace(
            welcome,
            max_frame_size=limits.max_frame_size,
            max_message_size=limits.max_message_size,
        )
        self._queue(welcome, None, now)
        self._sendq.configure(limits)

    def reject(
        self, code: CloseCode, reason: str, now: float, *, retry_after: float | None = None
    ) -> None:
        """Server: refuse the hello and end the session; then flush ``data_to_send()``.

        Args:
            code: e.g. ``UNAUTHORIZED``, ``OVERLOADED``.
            reason: human-readable detail for the edge's log.
            now: the current time (s).
            retry_after: seconds the edge should wait before reconnecting, or ``None``.

        Raises:
            StateError: not a server, or no hello is waiting for an answer.
            InvalidMessage: ``code`` is not a CloseCode one may send (``PEER_DEAD`` and
                ``CONNECTION_LOST`` are local), or ``reason`` / ``retry_after`` is invalid.
        """
        close = close_message(code, reason, retry_after)
        self._go("reject")
        self._queue(close, None, now)
        self._events.append(Closed(close.code, close.reason, False, retry_after))

    # --- both ------------------------------------------------------------------------------

    def send(self, message: Message, now: float) -> int | None:
        """Queue an application message; then call ``data_to_send()``.

        Args:
            message: any kind this side may send that is not session-managed.
            now: the current time (s).

        Returns:
            Its seq if the kind needs an ack (keep it with the message in the outbox until
            an ``Acked`` event covers it), else ``None``.

        Raises:
            StateError: the session is not ``OPEN``.
            WindowFull: ``window`` messages are unacknowledged; keep this one for later.
            UsageError: a session-managed kind, a kind the other side sends, or not a message.
            MessageTooLarge: it encodes to more than the agreed limits (nothing is sent and
                no seq is used: dead-letter it).
            InvalidMessage: it does not encode (``field`` says why).
        """
        if not isinstance(message, Message):
            raise UsageError(f"send() takes a Message, got {type(message).__name__}")
        to = self._moves.get("send")
        if to is None:
            raise StateError(self._state, "send", self.role)
        cls = message.__class__
        if cls.control or not (cls.from_edge if self._is_client else cls.from_hub):
            who = "the session" if cls.control else ("the hub" if self._is_client else "the edge")
            raise UsageError(f"{cls.kind} is sent by {who}, not through send()")
        if cls.needs_ack:
            if len(self._unacked) >= self.config.window:
                raise WindowFull(self.config.window)
            seq = self._next_seq
            if seq > MAX_SEQ:  # pragma: no cover - 2**64 messages
                raise UsageError("sequence numbers exhausted")
            self._sendq.put(self._encode_to_send(message, seq), Priority.STATUS, seq)
            self._next_seq = seq + 1
            if not self._unacked:
                self._acks_awaited_since = now
            self._unacked.append((seq, message))
            self._last_sent = now
            return seq
        flow = None if cls.flow_field is None else getattr(message, cls.flow_field)
        self._sendq.put(self._encode_to_send(message, None), cls.priority, flow=flow)
        self._last_sent = now
        return None

    def _encode_to_send(self, message: Message, seq: int | None) -> bytes:
        frame = encode(message, seq)
        size = len(frame) - HEADER_SIZE
        if not self._sendq.fits(size):
            raise MessageTooLarge(message.kind, size, self._sendq.limits.largest_message)
        return frame

    def close(
        self, code: CloseCode, reason: str, now: float, *, retry_after: float | None = None
    ) -> None:
        """Start an orderly close; then flush ``data_to_send()`` and wait for ``Closed``.

        Acknowledges what was received first, sends ``close`` and waits at most
        ``close_timeout`` for the peer's (drive ``handle_timer``). In ``IDLE`` it ends at
        once; in ``CLOSING`` or ``CLOSED`` it does nothing.

        Args:
            code: why (``NORMAL``, ``GOING_AWAY``...).
            reason: human-readable detail.
            now: the current time (s).
            retry_after: seconds the peer should wait before reconnecting, or ``None``.

        Raises:
            InvalidMessage: ``code`` is not a CloseCode one may send (``PEER_DEAD`` and
                ``CONNECTION_LOST`` are local), or ``reason`` / ``retry_after`` is invalid.
        """
        close = close_message(code, reason, retry_after)
        state = self._state
        if state is SessionState.OPEN:
            self._flush_ack(now)  # while acks may still be sent
        to = self._go("close")
        if to is state:  # already closing or closed
            return
        self._close_code, self._close_reason, self._close_retry_after = (
            close.code,
            close.reason,
            retry_after,
        )
        if to is SessionState.CLOSED:  # from IDLE: nothing was said, nothing to say
            self._events.append(Closed(close.code, close.reason, False, retry_after))
            return
        self._queue(close, None, now)
        self._close_deadline = now + self.config.close_timeout

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the transport; then drain ``events_received()`` and ``data_to_send()``.

        Never raises for bad input: a frame that fails to decode or validate, or that the
        state does not allow, closes the session (``Closed`` event) after acknowledging what
        was delivered before it; an unknown kind is answered with an error and skipped.

        Args:
            data: any number of bytes (partial frames are kept until completed).
            now: the current time (s).
        """
        if self._state is SessionState.CLOSED or not data:
            return
        self._last_received = now
        payloads, too_large = self._decoder.feed_frames(data)
        for payload in payloads:
            if not self._on_payload(payload, now, False):
                return
        if too_large is not None:
            self._fail(CloseCode.FRAME_TOO_LARGE, str(too_large), now)
            return
        if self._acks_owed >= self.config.ack_every:
            self._flush_ack(now)

    def heard(self, now: float) -> None:
        """The transport received bytes that do not make a whole frame yet (a large
        WebSocket message on a slow link): the peer is alive. Adapters call it per read."""
        if self._state is not SessionState.CLOSED:
            self._last_received = now

    def _on_payload(self, payload: bytes | bytearray | memoryview, now: float, whole: bool) -> bool:
        """Decode and apply one frame payload (``whole``: reassembled from chunks); False
        once the session has ended."""
        try:
            seq, message = decode_payload(payload)
        except UnknownKind as exc:
            self._refuse(exc.seq, ErrorCode.UNKNOWN_KIND, str(exc), now)
            return True
        except DecodeError as exc:
            self._fail(CloseCode.PROTOCOL_ERROR, str(exc), now)
            return False
        cls = message.__class__
        event = self._kinds_in.get(cls)
        if event is None:
            sender = "hub" if self._is_client else "edge"
            self._fail(CloseCode.PROTOCOL_ERROR, f"the {sender} may not send {cls.kind}", now)
            return False
        if event not in self._moves:
            self._fail(
                CloseCode.PROTOCOL_ERROR, f"unexpected {cls.kind} in state {self._state.name}", now
            )
            return False
        if cls is Chunk:
            return self._on_chunk(message, now, whole)  # type: ignore[arg-type]
        if event != "recv_message":
            self._on_control(event, message, now)
            return self._state is not SessionState.CLOSED
        if seq is not None:
            if seq <= self._received_up_to:
                # A duplicate (resent after a reconnect): acked, not delivered. With
                # manual_ack, one not yet released is acked when release() covers it.
                if not self.config.manual_ack or seq <= self._released_up_to:
                    self._owe_ack(now)
                return True
            self._received_up_to = seq
            if not self.config.manual_ack:
                self._owe_ack(now)
        self._events.append(MessageReceived(seq, message))
        return True

    def _on_chunk(self, chunk: Chunk, now: float, whole: bool) -> bool:
        if whole:
            self._fail(CloseCode.PROTOCOL_ERROR, "a chunk inside a chunked message", now)
            return False
        try:
            reassembler = self._reassembler
            if reassembler is None:
                reassembler = self._reassembler = Reassembler(self.config.max_message_size)
            payload = reassembler.feed(chunk)
        except ChunkRefused as exc:
            self._refuse(exc.seq or None, ErrorCode.TOO_LARGE, exc.reason, now)
            return True
        except DecodeError as exc:
            self._fail(CloseCode.PROTOCOL_ERROR, str(exc), now)
            return False
        return True if payload is None else self._on_payload(payload, now, True)

    def _on_control(self, event: str, message: Message, now: float) -> None:
        if event == "recv_ack":
            self._on_ack(message.up_to, now)  # type: ignore[attr-defined]
        elif event == "recv_ping":
            if self._state is SessionState.OPEN:  # never answer after our close
                self._queue(Pong(message.nonce), None, now)  # type: ignore[attr-defined]
        elif event == "recv_pong":
            pass  # arrival already counted for liveness
        elif event == "recv_error":
            self._events.append(PeerError(message))  # type: ignore[arg-type]
        elif event == "recv_close":
            self._on_close(message, now)  # type: ignore[arg-type]
        elif event == "recv_hello":
            self._on_hello(message, now)  # type: ignore[arg-type]
        elif event == "recv_welcome":
            self._on_welcome(message, now)  # type: ignore[arg-type]

    def _on_ack(self, up_to: int, now: float) -> None:
        highest_sent = self._next_seq - 1
        if up_to > highest_sent:
            self._fail(
                CloseCode.PROTOCOL_ERROR,
                f"ack up_to={up_to} but the highest seq sent is {highest_sent}",
                now,
            )
            return
        if up_to <= self._acked_up_to:
            return  # nothing new (acks are cumulative)
        self._acked_up_to = up_to
        unacked = self._unacked
        done = 0
        for seq, _ in unacked:
            if seq > up_to:
                break
            done += 1
        if done:
            del unacked[:done]
            if not unacked:
                self._acks_awaited_since = None
        self._events.append(Acked(up_to))

    def _on_close(self, close: Close, now: float) -> None:
        if self._state is SessionState.CLOSING:  # the answer to ours
            self._go("recv_close")
            self._events.append(
                Closed(self._close_code, self._close_reason, False, self._close_retry_after)
            )
            return
        self._flush_ack(now)
        self._queue(Close(close.code), None, now)  # echo the code, as WebSocket does
        self._go("recv_close")
        self._events.append(Closed(close.code, close.reason, True, close.retry_after))

    def _refuse(self, seq: int | None, code: ErrorCode, text: str, now: float) -> None:
        """Answer an error for a message we will not deliver (unknown kind, too large)."""
        state = self._state
        if state is SessionState.CLOSED or state is SessionState.CLOSING:
            return
        if seq is not None:
            # Processed (by refusing it): ack it so the sender does not resend it forever.
            # With manual_ack it is released at once if everything before it is, else the
            # application's release() of ``received_up_to`` covers it later.
            if seq > self._received_up_to:
                if self._released_up_to == self._received_up_to:
                    self._released_up_to = seq
                self._received_up_to = seq
            if not self.config.manual_ack or self._released_up_to >= seq:
                self._owe_ack(now)
        error = Error(code, text[:REASON_LIMIT], seq)
        self._queue(error, None, now)
        self._events.append(Refused(error))

    def _owe_ack(self, now: float, count: int = 1) -> None:
        self._acks_owed += count
        if self._ack_deadline is None:
            self._ack_deadline = now + self.config.ack_delay

    def release(self, up_to: int, now: float) -> None:
        """``manual_ack``: every peer seq <= ``up_to`` is processed and may be acknowledged.

        The ack goes out as for delivered messages in the default mode: within
        ``ack_delay``, or at once when ``ack_every`` are owed; then call ``data_to_send()``.
        Releasing what is already released does nothing; in ``CLOSING`` or ``CLOSED`` it
        does nothing either (no ack follows our close).

        Args:
            up_to: a seq the session has delivered (or dropped as a duplicate), at most
                ``received_up_to``. Release cumulatively: the caller tracks which seqs are
                done and releases the highest seq below the oldest one still in progress.
            now: the current time (s).

        Raises:
            UsageError: the session is not in ``manual_ack`` mode, or ``up_to`` is beyond
                ``received_up_to``.
        """
        if not self.config.manual_ack:
            raise UsageError("release() needs SessionConfig(manual_ack=True)")
        if not (isinstance(up_to, int) and not isinstance(up_to, bool)):
            raise UsageError(f"release() takes a seq, got {up_to!r}")
        if up_to > self._received_up_to:
            raise UsageError(f"release({up_to}) is beyond received_up_to={self._received_up_to}")
        if up_to <= self._released_up_to or self._state is not SessionState.OPEN:
            return
        count = up_to - self._released_up_to
        self._released_up_to = up_to
        self._owe_ack(now, count)
        if self._acks_owed >= self.config.ack_every:
            self._flush_ack(now)

    def _flush_ack(self, now: float) -> None:
        """Send the owed cumulative ack now (only while OPEN: nothing follows our close)."""
        if self._acks_owed and self._state is SessionState.OPEN:
            up_to = self._released_up_to if self.config.manual_ack else self._received_up_to
            self._queue(Ack(up_to), None, now)
        self._acks_owed = 0
        self._ack_deadline = None

    def _fail(self, code: CloseCode, reason: str, now: float) -> None:
        """End the session because the peer broke the contract (or vanished mid-frame)."""
        reason = reason[:REASON_LIMIT]
        was = self._state
        self._flush_ack(now)
        self._go("protocol_error")
        if was is not SessionState.CLOSING:  # ours is already on its way otherwise
            self._queue(Close(code, reason), None, now)
        self._events.append(Closed(code, reason, False))

    def receive_eof(self, now: float) -> None:
        """The transport's byte stream ended (FIN, connection lost); then drain events.

        Ends the session with ``Closed``: our own close's code if we were closing, else
        ``CONNECTION_LOST`` (its reason says if the stream ended inside a frame).

        Args:
            now: the current time (s).
        """
        state = self._state
        if state is SessionState.CLOSED:
            return
        self._go("eof")
        self._acks_owed, self._ack_deadline = 0, None
        if state is SessionState.CLOSING:
            self._events.append(
                Closed(self._close_code, self._close_reason, False, self._close_retry_after)
            )
            return
        reason = "the connection ended without a close message"
        try:
            self._decoder.check_eof()
        except DecodeError as exc:
            reason = f"{reason}; {exc}"
        self._events.append(Closed(CloseCode.CONNECTION_LOST, reason, True))
