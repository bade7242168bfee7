"""Errors raised by the transports (QUIC, WebSocket) and the links built on them.

``TransportError`` is the root here; every aioquic, websockets, ``ssl`` or ``OSError``
failure is translated into one of these at the adapter boundary and chained with ``from``.
"""

from __future__ import annotations

__all__ = [
    "ConnectFailed",
    "HandshakeTimeout",
    "LinkClosed",
    "SessionRejected",
    "TransportError",
]


class TransportError(Exception):
    """A transport could not be set up or failed while in use."""


class ConnectFailed(TransportError):
    """Connecting failed: refused, unreachable, TLS handshake or certificate rejected.

    The message names the host, port and the underlying cause.
    """


class HandshakeTimeout(ConnectFailed):
    """The transport or session handshake did not finish within its timeout.

    Attributes:
        timeout: the bound that expired, seconds.
    """

    def __init__(self, message: str, *, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout


class SessionRejected(ConnectFailed):
    """The peer closed the session during the hello/welcome handshake.

    Attributes:
        code: the ``CloseCode`` the peer gave (e.g. ``VERSION_MISMATCH``).
        reason: the peer's reason text.
    """

    def __init__(self, code: object, reason: str) -> None:
        super().__init__(f"session rejected: {code}: {reason}")
        self.code = code
        self.reason = reason


class LinkClosed(TransportError):
    """The link is closed; no more messages can be sent on it.

    Attributes:
        code: the ``CloseCode`` the link was closed with, or ``None`` if the transport was
            lost without a close.
        reason: why it closed.
    """

    def __init__(self, code: object, reason: str) -> None:
        super().__init__(f"link closed: {code}: {reason}")
        self.code = code
        self.reason = reason
