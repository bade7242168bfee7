"""Errors raised by the transports (QUIC, WebSocket), under ``protocol.errors.TransportError``.

::

    protocol.errors.TransportError
    └── ConnectFailed             refused, unreachable, TLS or certificate failure
        ├── HandshakeTimeout      no transport handshake or no welcome in time
        ├── CertificateRejected   the hub refused our client certificate
        └── SessionRejected       the hub closed the session during hello/welcome

Every aioquic, websockets, ``ssl`` or ``OSError`` failure is translated into one of these at
the adapter boundary and chained with ``from``. Using a closed link raises
``protocol.errors.ConnectionClosed``.
"""

from __future__ import annotations

from protocol.errors import CloseCode, TransportError

__all__ = [
    "CertificateRejected",
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


class CertificateRejected(ConnectFailed):
    """The hub refused our client certificate during the TLS handshake (expired, not from
    its CA, not a node certificate, or none at all).

    Only a new certificate helps, so a dialer should not try another transport with the
    same one. Over QUIC the hub's TLS alert and reason arrive as a crypto error (RFC 9001
    §4.8); over WebSocket asyncio's TLS server closes the connection without sending its
    alert, so the rejection is inferred: the TLS handshake completed on our side and the
    hub closed the connection before answering the upgrade.

    Attributes:
        alert: the TLS alert name (``bad_certificate``, ``certificate_required``…), or
            ``None`` when the hub sent none (WebSocket).
        reason: the hub's reason text (QUIC), or ``""``.
    """

    def __init__(self, message: str, *, alert: str | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.alert = alert
        self.reason = reason


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
