"""The session's rules (docs/protocol.md, "Session"): its states, the one table of legal
transitions, version negotiation and what a ``close`` may carry. ``protocol.session``
applies them; like h11's ``_state.py``, the rules sit here in one module with this header.

Rules (docs/protocol.md, "Session"):

- Handshake: the client (edge) sends ``hello``; the server (hub) picks the highest protocol
  version in both ranges and reports ``HelloReceived``; the application answers with
  ``accept(welcome)`` or ``reject(code, reason)``. No common version closes both sides
  with ``VERSION_MISMATCH`` and a reason naming both ranges.
- Numbering: kinds with ``needs_ack`` get per-direction sequence numbers. The receiver
  delivers each seq once (a seq at or below the highest delivered is a duplicate: dropped,
  still acknowledged) and acks cumulatively after ``ack_every`` messages or ``ack_delay``
  seconds, whichever comes first; with ``SessionConfig(manual_ack=True)`` (the hub) it
  acks only what the application has released as processed (``release()``). At most
  ``window`` messages are unacknowledged; ``send()`` raises ``WindowFull`` beyond that
  (back-pressure).
- Resend: the edge passes what it persisted as unacknowledged to ``connect(pending=...)``;
  after the welcome it drops what ``welcome.received_up_to`` covers and resends the rest
  with their original seqs. It never reuses a seq the hub has seen.
- Liveness: the client pings when it has sent nothing for the ping interval, or heard
  nothing for the ping interval since it last asked for an answer (its last ping, or its
  oldest message still waiting for an ack), both plus 5%; either side declares the peer dead
  (``PeerDead``, then ``Closed(PEER_DEAD)``) when nothing arrived for ``liveness_timeout``,
  without waiting for the transport to notice.
- Close: ``close()`` sends ``close`` and waits up to ``close_timeout`` for the peer's;
  pings and pongs in flight never extend that. A protocol violation by the peer sends
  ``close(PROTOCOL_ERROR | FRAME_TOO_LARGE)`` and ends the session at once.
- Every session ends with exactly one ``Closed`` event; nothing is sent after ``close``.

The legal state transitions are the one table ``TRANSITIONS`` below; an operation the
table does not allow raises ``StateError`` (our misuse), a message the table does not
allow closes the session with ``PROTOCOL_ERROR`` (the peer's misbehaviour).
"""

from __future__ import annotations

import enum

from protocol.errors import CloseCode, InvalidMessage, VersionMismatch
from protocol.messages import REGISTRY, Ack, Close, Error, Hello, Message, Ping, Pong, Welcome

__all__ = [
    "MOVES",
    "REASON_LIMIT",
    "TRANSITIONS",
    "Role",
    "SessionState",
    "close_message",
    "kinds_in",
    "negotiate_version",
]

REASON_LIMIT = 1024
"""Characters of a close or error reason put on the wire."""


class Role(enum.Enum):
    """Which end of the session this is."""

    CLIENT = "client"
    """The edge agent: dials, sends ``hello``, pings."""
    SERVER = "server"
    """The cloud hub: accepts, answers ``welcome``, answers pings."""


class SessionState(enum.Enum):
    """Where a session is in its life (see ``TRANSITIONS``)."""

    IDLE = "idle"
    """Created; the client has not sent ``hello`` / the server has not received it."""
    HELLO_SENT = "hello_sent"
    """Client: ``hello`` sent, waiting for ``welcome``."""
    HELLO_RECEIVED = "hello_received"
    """Server: ``hello`` received, waiting for the application's ``accept()`` or ``reject()``."""
    OPEN = "open"
    """Messages flow both ways."""
    CLOSING = "closing"
    """We sent ``close`` and wait (at most ``close_timeout``) for the peer's."""
    CLOSED = "closed"
    """Over: nothing is sent or delivered any more."""


_S = SessionState
_CLIENT, _SERVER, _BOTH = (Role.CLIENT,), (Role.SERVER,), (Role.CLIENT, Role.SERVER)
_TALKING = (_S.HELLO_SENT, _S.HELLO_RECEIVED, _S.OPEN)
_LIVE = (_S.IDLE, *_TALKING)

# (roles, from states, event, to state). Events named ``recv_*`` come from the peer; the
# rest are our own calls or timers. Anything not listed is illegal.
_ROWS: tuple[tuple[tuple[Role, ...], tuple[SessionState, ...], str, SessionState | None], ...] = (
    # handshake
    (_CLIENT, (_S.IDLE,), "connect", _S.HELLO_SENT),
    (_SERVER, (_S.IDLE,), "recv_hello", _S.HELLO_RECEIVED),
    (_SERVER, (_S.HELLO_RECEIVED,), "accept", _S.OPEN),
    (_SERVER, (_S.HELLO_RECEIVED,), "reject", _S.CLOSED),
    (_CLIENT, (_S.HELLO_SENT,), "recv_welcome", _S.OPEN),
    # the open session; what was in flight when we sent close is still taken in
    (_BOTH, (_S.OPEN,), "send", None),
    (_BOTH, (_S.OPEN, _S.CLOSING), "recv_message", None),
    (_BOTH, (_S.OPEN, _S.CLOSING), "recv_ack", None),
    (_BOTH, (_S.OPEN, _S.CLOSING), "recv_ping", None),
    (_BOTH, (_S.OPEN, _S.CLOSING), "recv_pong", None),
    (_BOTH, (*_TALKING, _S.CLOSING), "recv_error", None),
    # endings
    (_BOTH, (_S.IDLE,), "close", _S.CLOSED),
    (_BOTH, _TALKING, "close", _S.CLOSING),
    (_BOTH, (_S.CLOSING, _S.CLOSED), "close", None),
    (_BOTH, (*_LIVE, _S.CLOSING), "recv_close", _S.CLOSED),
    (_BOTH, (_S.CLOSING,), "close_timeout", _S.CLOSED),
    (_BOTH, _LIVE, "peer_dead", _S.CLOSED),
    (_BOTH, (*_LIVE, _S.CLOSING), "protocol_error", _S.CLOSED),
    (_BOTH, (*_LIVE, _S.CLOSING), "eof", _S.CLOSED),
)

TRANSITIONS: dict[tuple[Role, SessionState, str], SessionState] = {
    (role, state, event): (state if to is None else to)
    for roles, states, event, to in _ROWS
    for role in roles
    for state in states
}
"""The legal transitions: (role, state, event) -> next state (``None`` in a row: stay)."""

# The same table indexed for the hot path: role -> state -> event -> next state.
MOVES: dict[Role, dict[SessionState, dict[str, SessionState]]] = {
    role: {state: {} for state in SessionState} for role in Role
}
for (_role, _state, _event), _next in TRANSITIONS.items():
    MOVES[_role][_state][_event] = _next

# Session-managed kinds and the table event a received one is.
_CONTROL_EVENTS: dict[type[Message], str] = {
    Hello: "recv_hello",
    Welcome: "recv_welcome",
    Ack: "recv_ack",
    Ping: "recv_ping",
    Pong: "recv_pong",
    Error: "recv_error",
    Close: "recv_close",
}


def kinds_in(role: Role) -> dict[type[Message], str]:
    """Every kind the peer of ``role`` may send -> the table event a received one is.

    Built from the registry when asked (and again if a kind registered since), so kinds
    defined beside their rules (``protocol.stream_messages``, ``protocol.upgrade``) count
    whatever the import order.
    """
    cached = _KINDS_IN.get(role)
    if cached is not None and cached[0] == len(REGISTRY):
        return cached[1]
    table = {
        cls: _CONTROL_EVENTS.get(cls, "recv_message")
        for cls in REGISTRY.values()
        if (cls.from_hub if role is Role.CLIENT else cls.from_edge)
    }
    _KINDS_IN[role] = (len(REGISTRY), table)
    return table


_KINDS_IN: dict[Role, tuple[int, dict[type[Message], str]]] = {}


_LOCAL_CODES = frozenset({CloseCode.PEER_DEAD, CloseCode.CONNECTION_LOST})


def close_message(code: CloseCode, reason: str, retry_after: float | None) -> Close:
    """The ``close`` we send, checked before any state changes."""
    try:
        code = CloseCode(code)
    except ValueError:
        raise InvalidMessage("code", f"{code!r} is not a CloseCode") from None
    if code in _LOCAL_CODES:
        raise InvalidMessage("code", f"{code.name} is reported locally, never sent")
    if not isinstance(reason, str):
        raise InvalidMessage("reason", f"expected str, got {type(reason).__name__}")
    return Close(code, reason[:REASON_LIMIT], retry_after)


def negotiate_version(ours: tuple[int, int], theirs: tuple[int, int]) -> int:
    """Pick the highest protocol version in both inclusive ranges.

    Args:
        ours: our ``(min, max)`` versions.
        theirs: the peer's ``(min, max)`` versions.

    Returns:
        The version to speak.

    Raises:
        VersionMismatch: the ranges do not overlap; the message names both.
    """
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    if low > high:
        raise VersionMismatch(ours, theirs)
    return high
