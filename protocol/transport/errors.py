"""Errors raised by the transports (QUIC, WebSocket), under ``protocol.errors.TransportError``.

::

    protocol.errors.TransportError
    └── ConnectFailed             refused, unreachable, TLS or certificate failure
        ├── HandshakeTimeout      no transport handshake or no welcome in time
        └── SessionRejected       the hub closed the session during hello/welcome

Every aioquic, websockets, ``ssl`` or ``OSError`` failure is translated into one of these at
the adapter boundary and chained with ``from``. Using a closed link raises
``protocol.errors.ConnectionClosed``.
"""

from __future__ import annotations

from protocol.errors import CloseCode, TransportError

__all__ = [
    "ConnectFailed",
    "HandshakeTimeout",
    "SessionRejected",
    "TransportError",
]


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
        retry_after: seconds the hub asked us to wait before dialling again, or ``None``.
    """

    def __init__(self, code: CloseCode, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"session rejected: {code.name}: {reason}")
        self.code = code
        self.reason = reason
        self.retry_after = retry_after
