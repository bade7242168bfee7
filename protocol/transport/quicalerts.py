"""QUIC connection closes in words: the TLS alert a crypto error carries (RFC 9001 §4.8).

Used by :mod:`protocol.transport.quic` to tell an operator why a handshake or a connection
ended (``TLS alert unknown_ca``, ``error 0xa``).
"""

from __future__ import annotations

from aioquic.quic import events as qe

__all__ = ["alert", "describe"]


_TLS_ALERTS = {
    42: "bad_certificate",
    43: "unsupported_certificate",
    44: "certificate_revoked",
    45: "certificate_expired",
    46: "certificate_unknown",
    48: "unknown_ca",
    116: "certificate_required",
}


def alert(code: int) -> str | None:
    """The TLS alert a QUIC crypto error carries (RFC 9001 §4.8), or ``None``."""
    if 0x100 <= code <= 0x1FF:
        number = code - 0x100
        return _TLS_ALERTS.get(number, str(number))
    return None


def describe(event: qe.ConnectionTerminated) -> str:
    """A QUIC close in words: the TLS alert for crypto errors (RFC 9001 §4.8)."""
    alert_name = alert(event.error_code)
    what = f"TLS alert {alert_name}" if alert_name is not None else f"error 0x{event.error_code:x}"
    return f"connection closed: {what} {event.reason_phrase}".rstrip()
