"""What ``Session.events_received()`` returns: ``SessionEvent`` and its subclasses.

Kept beside ``protocol.session`` as aioquic keeps ``quic/events.py`` and h11 ``_events.py``:
a transport, the hub's bridge and the agent's link match on these classes without reading the
state machine. Every session ends with exactly one ``Closed``.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import CloseCode, MessageTooLarge
from protocol.messages import Error, Hello, Message, Welcome

__all__ = [
    "Acked",
    "Closed",
    "Established",
    "HelloReceived",
    "MessageReceived",
    "PeerDead",
    "PeerError",
    "Refused",
    "SendFailed",
    "SessionEvent",
]


class SessionEvent:
    """Base of what ``Session.events_received()`` returns.

    Events are slotted dataclasses, like aioquic's; they are not frozen because one is made
    per received message and a frozen dataclass costs twice as much to build.
    """

    __slots__ = ()


@dataclass(slots=True)
class HelloReceived(SessionEvent):
    """Server: a client said hello. Answer with ``accept(welcome)`` or ``reject()``."""

    hello: Hello
    """The client's hello (node name, versions, capabilities, inventory, node info)."""
    version: int
    """The negotiated protocol version; put it in the welcome."""


@dataclass(slots=True)
class Established(SessionEvent):
    """Client: the hub accepted; the session is open and pending messages were resent."""

    welcome: Welcome
    """The hub's welcome (version, hub time, session id, heartbeat interval)."""


@dataclass(slots=True)
class MessageReceived(SessionEvent):
    """An application message arrived (delivered once per seq)."""

    seq: int | None
    """Its sequence number (persist it as "received up to" on the hub), or ``None`` for
    kinds that need no ack."""
    message: Message
    """The message."""


@dataclass(slots=True)
class Acked(SessionEvent):
    """The peer has everything we numbered up to ``up_to``: drop it from the outbox."""

    up_to: int
    """The highest acknowledged seq (cumulative)."""


@dataclass(slots=True)
class PeerError(SessionEvent):
    """The peer reported a problem with one of our messages; the session goes on."""

    error: Error
    """The error message (code, text, ``in_reply_to`` seq)."""


@dataclass(slots=True)
class Refused(SessionEvent):
    """We refused one of the peer's messages and told it so; the session goes on: a kind
    this version does not know (``UNKNOWN_KIND``), or a chunked message over our limits
    (``TOO_LARGE``, refused before any of it was buffered). Its seq, if any, is acked."""

    error: Error
    """The error sent back (code, text naming the kind or the sizes, ``in_reply_to``)."""


@dataclass(slots=True)
class SendFailed(SessionEvent):
    """Client: a pending message passed to ``connect()`` cannot be resent: it is over the
    limits the handshake agreed on (the hub takes less than it did). It is not resent and
    its seq is skipped; dead-letter it (nothing will acknowledge it)."""

    seq: int
    """Its seq."""
    message: Message
    """The message."""
    error: MessageTooLarge
    """Why (its size and the limit, bytes)."""


@dataclass(slots=True)
class PeerDead(SessionEvent):
    """Nothing arrived within ``liveness_timeout``; a ``Closed(PEER_DEAD)`` follows."""

    silent_for: float
    """Seconds since the last byte arrived."""


@dataclass(slots=True)
class Closed(SessionEvent):
    """The session is over (always the last event). Flush ``data_to_send()``, then close
    the transport."""

    code: CloseCode
    """Why (ours if we closed, the peer's if it did)."""
    reason: str
    """Human-readable detail."""
    by_peer: bool
    """True if the peer closed, vanished or went silent; False if we closed."""
    retry_after: float | None = None
    """Seconds the peer asked us to wait before reconnecting, or ``None``."""
