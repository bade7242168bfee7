"""The one exception tree of the ``protocol`` package, and the wire's numeric codes.

::

    ProtocolError                       root: catch this to catch everything from protocol/
    ├── UsageError                      we misused it (a bug or a bad setting on our side)
    │   ├── StateError                  an operation the session's state does not allow
    │   ├── WindowFull                  send() with the unacknowledged window full
    │   ├── InvalidMessage              a message constructed with an invalid field value
    │   └── SettingsError               a settings key with a missing or invalid value
    ├── RemoteProtocolError             the peer misbehaved (its bytes break the contract)
    │   ├── DecodeError                 a frame or field that does not decode or validate
    │   │   ├── FrameTooLarge           a length prefix over the maximum frame size
    │   │   └── UnknownKind             a kind tag this version does not know
    │   └── VersionMismatch             no protocol version both sides speak
    ├── ConnectionClosed                the session ended (raised by transports on use after close)
    ├── TransportError                  raised by the transport adapters (protocol/transport/)
    ├── PKIError                        a certificate, key or CSR is invalid (protocol.pki)
    └── DeviceError                     a device document or twin value is bad (protocol.devices)
        ├── InvalidDocument             a DeviceModel or Device breaks the schema
        └── InvalidValue                a twin value breaks its model property

The split follows h11 (``LocalProtocolError`` / ``RemoteProtocolError``) and websockets'
``exceptions.py``: errors carry attributes (``field``, ``code``, ``state``...), not only text.
``InvalidMessage``, ``SettingsError`` and ``DeviceError`` also derive from ``ValueError`` and
``StateError`` from ``RuntimeError`` so that generic handlers keep working. ``PKIError`` and
``DeviceError`` are defined beside the code that raises them.

``CloseCode`` and ``ErrorCode`` are ``IntEnum`` s: their integer values are on the wire and
never change meaning; new codes get new numbers.
"""

from __future__ import annotations

import enum

__all__ = [
    "CloseCode",
    "ConnectionClosed",
    "DecodeError",
    "ErrorCode",
    "FrameTooLarge",
    "InvalidMessage",
    "MessageTooLarge",
    "ProtocolError",
    "RemoteProtocolError",
    "SettingsError",
    "StateError",
    "TransportError",
    "UnknownKind",
    "UsageError",
    "VersionMismatch",
    "WindowFull",
]


class CloseCode(enum.IntEnum):
    """Why a session ended; carried by the ``close`` message and the ``Closed`` event.

    Codes marked *local* are never sent on the wire: the session reports them in its own
    ``Closed`` event when the connection ended without a ``close`` message.
    """

    NORMAL = 0
    """Orderly close: the sender is done (e.g. the agent is reconfigured)."""
    GOING_AWAY = 1
    """The sender is shutting down or restarting; reconnect (honour ``retry_after``)."""
    PROTOCOL_ERROR = 2
    """The peer broke this contract: a frame failed to decode or validate, or a message
    arrived in a state that does not allow it. The reason names the field or message."""
    VERSION_MISMATCH = 3
    """No protocol version is in both sides' ranges; the reason names both ranges."""
    FRAME_TOO_LARGE = 4
    """A length prefix exceeded the receiver's maximum frame size."""
    UNAUTHORIZED = 5
    """The hub refuses this node (certificate does not name it, node deleted, revoked)."""
    OVERLOADED = 6
    """The hub is over capacity; retry after ``retry_after`` seconds."""
    SUPERSEDED = 7
    """A newer connection from the same node replaced this one."""
    INTERNAL_ERROR = 8
    """The sender hit a bug or an unexpected failure; reconnecting may help."""
    PEER_DEAD = 9
    """*local*: nothing arrived within the liveness timeout."""
    CONNECTION_LOST = 10
    """*local*: the transport ended without a ``close`` message."""


class ErrorCode(enum.IntEnum):
    """What went wrong with one message; carried by the ``error`` message.

    An error does not end the session; ``in_reply_to`` names the offending message's seq.
    """

    UNKNOWN_KIND = 1
    """The receiver does not know the message kind (the reply names the tag)."""
    INVALID_MESSAGE = 2
    """The message decoded but its content is not acceptable to the application."""
    FORBIDDEN = 3
    """The node may not touch this object (it is not its own pod, device or secret),
    as the Kubernetes Node authorizer decides."""
    NOT_FOUND = 4
    """The referenced object does not exist (any more)."""
    CONFLICT = 5
    """A stale resourceVersion or twin version lost against a newer one."""
    UNSUPPORTED = 6
    """The receiver understood the request but lacks the capability to serve it."""
    RATE_LIMITED = 7
    """Too many requests of this kind; the sender should slow down."""
    INTERNAL = 8
    """The receiver failed while handling the message; the sender may retry later."""
    TOO_LARGE = 9
    """The message is over the receiver's ``max_message_size`` (or its reassembly memory):
    refused and acknowledged; resending it cannot help (dead-letter it)."""


class ProtocolError(Exception):
    """Root of every error raised by the ``protocol`` package."""


# --- we misused it ------------------------------------------------------------------------


class UsageError(ProtocolError):
    """Our side used the protocol API wrongly; fixing it needs a code or settings change."""


class StateError(UsageError, RuntimeError):
    """An operation is not allowed in the session's current state.

    Attributes:
        state: the ``SessionState`` the session was in.
        event: the name of the operation or event that was refused (e.g. ``"send"``).
        role: the session's ``Role``, or ``None``.
    """

    def __init__(self, state: object, event: str, role: object = None) -> None:
        name = getattr(state, "name", state)
        who = f" for a {getattr(role, 'value', role)}" if role is not None else ""
        super().__init__(f"{event!s} is not allowed{who} in state {name}")
        self.state = state
        self.event = event
        self.role = role


class WindowFull(UsageError):
    """``send()`` was called with ``window`` messages already unacknowledged.

    This is back-pressure, not a failure: keep the message in the outbox and send it after
    the next ``Acked`` event.

    Attributes:
        window: the window size (messages) that is full.
    """

    def __init__(self, window: int) -> None:
        super().__init__(f"{window} messages are unacknowledged (the window is full)")
        self.window = window


class InvalidMessage(UsageError, ValueError):
    """A message or reference was constructed with an invalid field value.

    Attributes:
        field: the offending field's name, dotted for nested values (``"ref.uid"``).
        reason: what is wrong with it.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class MessageTooLarge(InvalidMessage):
    """A message encodes to more than the session may send (``field="frame"``): over the
    message limit agreed at the handshake, or over the frame limit when the peer takes no
    chunks. Resending cannot help: dead-letter it.

    Attributes:
        size: the encoded payload (bytes).
        limit: the limit it is over (bytes).
    """

    def __init__(self, kind: str, size: int, limit: int) -> None:
        super().__init__("frame", f"{kind} encodes to {size} bytes, over {limit} bytes")
        self.size = size
        self.limit = limit


class SettingsError(UsageError, ValueError):
    """A setting is unknown, missing or has a value of the wrong type.

    Attributes:
        key: the dotted settings key (``"transport.quic_port"``).
        expected: the expected type or range, in words (``"int"``, ``"> 0"``).
        source: where the bad value came from (a file path, ``"environment
            EDGEAGENT_TRANSPORT__QUIC_PORT"``, ``"override"``), or ``""``.
    """

    def __init__(self, key: str, expected: str, got: object = None, source: str = "") -> None:
        where = f" (from {source})" if source else ""
        shown = "" if got is None else f", got {got!r}"
        super().__init__(f"setting {key}: expected {expected}{shown}{where}")
        self.key = key
        self.expected = expected
        self.got = got
        self.source = source


# --- the peer misbehaved --------------------------------------------------------------------


class RemoteProtocolError(ProtocolError):
    """The peer sent something that breaks the wire contract."""


class DecodeError(RemoteProtocolError):
    """A frame did not decode, or a field did not validate.

    Attributes:
        field: the offending field (``"b.ref.uid"`` for a body field, ``"k"`` / ``"s"`` /
            ``"b"`` for the envelope, ``"frame"`` for the msgpack payload itself).
        kind: the message kind tag when it was known, else ``None``.
        reason: what is wrong with it.
    """

    def __init__(self, field: str, reason: str, kind: str | None = None) -> None:
        where = f"{kind}.{field}" if kind else field
        super().__init__(f"invalid {where}: {reason}")
        self.field = field
        self.kind = kind
        self.reason = reason


class FrameTooLarge(DecodeError):
    """A frame's length prefix exceeds the receiver's maximum, checked before buffering.

    Attributes:
        size: the announced payload length (bytes).
        limit: the maximum frame size (bytes).
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__("length", f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class UnknownKind(DecodeError):
    """A well-formed frame carries a kind tag this version does not know.

    The frame was consumed; the session answers ``Error(code=UNKNOWN_KIND)`` and goes on.

    Attributes:
        kind: the unknown tag.
        seq: the frame's sequence number, or ``None``.
    """

    def __init__(self, kind: str, seq: int | None) -> None:
        super().__init__("k", f"unknown message kind {kind!r}", kind=None)
        self.kind = kind
        self.seq = seq


class VersionMismatch(RemoteProtocolError):
    """The two sides' protocol version ranges do not overlap.

    Attributes:
        ours: our supported range ``(min, max)``.
        theirs: the peer's range ``(min, max)``.
    """

    def __init__(self, ours: tuple[int, int], theirs: tuple[int, int]) -> None:
        super().__init__(
            f"no common protocol version: we speak {ours[0]}..{ours[1]}, "
            f"the peer speaks {theirs[0]}..{theirs[1]}"
        )
        self.ours = ours
        self.theirs = theirs


# --- outcomes ---------------------------------------------------------------------------------


class ConnectionClosed(ProtocolError):
    """The session is closed; raised by transports when it is used after that.

    Attributes:
        code: the ``CloseCode``.
        reason: the human-readable reason.
        by_peer: True if the peer closed (or vanished), False if we did.
        retry_after: seconds the peer asked us to wait before reconnecting, or ``None``.
    """

    def __init__(
        self, code: CloseCode, reason: str, by_peer: bool, retry_after: float | None = None
    ) -> None:
        who = "peer" if by_peer else "we"
        super().__init__(f"session closed by {who}: {code.name} {reason}".rstrip())
        self.code = code
        self.reason = reason
        self.by_peer = by_peer
        self.retry_after = retry_after


class TransportError(ProtocolError):
    """Root for errors of the transport adapters (``protocol/transport/``).

    The adapters translate aioquic, websockets, ``ssl`` and ``OSError`` failures into
    subclasses of this and chain the original with ``from``.
    """
