"""TLS on an accepted or dialled TCP transport with one shared read buffer per thread.

asyncio's TLS layer (``asyncio.sslproto.SSLProtocol``) allocates and
touches a 256 KiB read buffer per connection, which alone is four times our per-connection
budget on the hub (10,000 WebSocket sessions at ≤ 64 KiB each): measured, a bare websockets
server with mutual TLS holds ~300 KiB per idle connection. So we do not hand ``ssl=`` to
asyncio; each connection starts TLS itself on its TCP transport, exactly as
``loop.start_tls()`` does, with an ``SSLProtocol`` that reads through one
``TLS_READ_BUFFER`` (16 KiB, the largest TLS record) shared by every connection of the
thread (see :class:`_LeanSSLProtocol`).

This is the one module that reaches into asyncio's TLS internals (``asyncio.sslproto``,
which has no public API for the buffer): the WebSocket transport uses :func:`start_tls`,
the embedded API's HTTPS listener :func:`server_protocol`.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import threading
from asyncio import sslproto
from typing import Any

from protocol.transport.link import TRANSPORT_CLOSE_BOUND

__all__ = ["TLS_READ_BUFFER", "certificate_alert", "server_protocol", "start_tls"]

TLS_READ_BUFFER = 16 * 1024
"""Bytes of TLS read buffer per connection (asyncio's default is 256 KiB)."""

_scratch = threading.local()

#: Every instance attribute ``asyncio.sslproto.SSLProtocol`` sets (Python 3.11-3.13), made
#: slots of our subclass: SSLProtocol sets 37, past the 30 that an instance dict can share
#: its keys for, so each connection held a combined dict of ~1.6 KiB; as slots, ~0.3 KiB.
#: An attribute a later Python adds simply lands in the instance dict again.
_SSLPROTOCOL_SLOTS = (
    "_app_protocol",
    "_app_protocol_buffer_updated",
    "_app_protocol_get_buffer",
    "_app_protocol_is_buffer",
    "_app_reading_paused",
    "_app_state",
    "_app_transport",
    "_app_transport_created",
    "_app_writing_paused",
    "_conn_lost",
    "_eof_received",
    "_extra",
    "_handshake_start_time",
    "_handshake_timeout_handle",
    "_incoming",
    "_incoming_high_water",
    "_incoming_low_water",
    "_loop",
    "_outgoing",
    "_outgoing_high_water",
    "_outgoing_low_water",
    "_server_hostname",
    "_server_side",
    "_shutdown_timeout_handle",
    "_ssl_buffer",
    "_ssl_buffer_view",
    "_ssl_handshake_timeout",
    "_ssl_reading_paused",
    "_ssl_shutdown_timeout",
    "_ssl_writing_paused",
    "_sslcontext",
    "_sslobj",
    "_state",
    "_transport",
    "_waiter",
    "_write_backlog",
    "_write_buffer_size",
)


class _LeanSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with one 16 KiB read buffer per thread instead of 256 KiB per
    connection, its attributes in slots, and its write backlog a list instead of a deque.

    Sharing is safe because the event loop uses the buffer synchronously: it calls
    ``get_buffer()``, ``recv_into()`` it, then ``buffer_updated()``, which copies the bytes
    into the connection's own ``MemoryBIO`` before the callback returns. One buffer per
    thread, since each thread runs its own loop. (Python 3.10's TLS layer has no such
    buffer; setting the attributes there is harmless.)
    """

    # Python 3.10's SSLProtocol is another class (with _SSLPipe): only our own attribute.
    __slots__ = (_SSLPROTOCOL_SLOTS if sys.version_info >= (3, 11) else ()) + ("_owner",)

    max_size = TLS_READ_BUFFER

    def __init__(self, loop: Any, app_protocol: Any, *args: Any, **kwargs: Any) -> None:
        # SSLProtocol has class-level defaults for these three (read before they are
        # set); a slot hides them, so start them as they would be.
        self._handshake_start_time = None
        self._handshake_timeout_handle = None
        self._shutdown_timeout_handle = None
        super().__init__(loop, app_protocol, *args, **kwargs)
        self._owner = app_protocol
        view = getattr(_scratch, "view", None)
        if view is None:
            view = _scratch.view = memoryview(bytearray(TLS_READ_BUFFER))
        self._ssl_buffer = view.obj
        self._ssl_buffer_view = view
        # asyncio queues writes made before the handshake or while OpenSSL wants to read
        # in a deque, 760 bytes even when empty (its first block): a list does the same
        # here (append, [0], del [0], clear, truth), 56 bytes, and is hardly ever longer
        # than one item.
        self._write_backlog: Any = []

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        super()._on_handshake_complete(handshake_exc)
        # asyncio keeps the peer certificate parsed into a dict for
        # get_extra_info("peercert"): ~1.7 KiB held for the connection's life, 17 MiB on a
        # hub with 10,000 sessions. We read the DER from the ssl_object instead.
        self._extra.pop("peercert", None)

    def connection_lost(self, exc: Exception | None) -> None:
        # asyncio tells the application about a TLS failure only on a later loop turn;
        # record it now so that a failed connect can name it (e.g. the hub's alert).
        if isinstance(exc, ssl.SSLError):
            try:
                self._owner.tls_error = exc
            except AttributeError:  # an application protocol with __slots__ (aiohttp's)
                pass
        super().connection_lost(exc)


def start_tls(
    connection: asyncio.Protocol,
    transport: asyncio.BaseTransport,
    context: ssl.SSLContext,
    *,
    server_side: bool,
    server_hostname: str | None,
    handshake_timeout: float,
) -> asyncio.Future[None]:
    """Put TLS between ``transport`` and ``connection``, as ``loop.start_tls()`` does.

    ``connection.connection_made()`` is called again, with the TLS transport, once the
    handshake has succeeded. Returns a future that completes with the handshake.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    kwargs: dict[str, Any] = {"ssl_handshake_timeout": handshake_timeout}
    if sys.version_info >= (3, 11):
        kwargs["ssl_shutdown_timeout"] = TRANSPORT_CLOSE_BOUND
    protocol = _LeanSSLProtocol(
        loop,
        connection,
        context,
        waiter,
        server_side=server_side,
        server_hostname=server_hostname,
        **kwargs,
    )
    transport.set_protocol(protocol)  # type: ignore[attr-defined]
    protocol.connection_made(transport)
    return waiter


def server_protocol(
    app_protocol: asyncio.Protocol,
    context: ssl.SSLContext,
    *,
    handshake_timeout: float,
    shutdown_timeout: float = TRANSPORT_CLOSE_BOUND,
) -> asyncio.Protocol:
    """The protocol for one accepted connection of a TLS server, as
    ``loop.create_server(ssl=context)`` would build it, but with the shared read buffer.

    Use it as (part of) the protocol factory given to ``loop.create_server`` without
    ``ssl=``; ``app_protocol`` sees the decrypted stream. Must be called on the loop's
    thread. Timeouts in seconds.
    """
    kwargs: dict[str, Any] = {"ssl_handshake_timeout": handshake_timeout}
    if sys.version_info >= (3, 11):
        kwargs["ssl_shutdown_timeout"] = shutdown_timeout
    loop = asyncio.get_running_loop()
    return _LeanSSLProtocol(loop, app_protocol, context, None, server_side=True, **kwargs)


#: OpenSSL's names for the alerts a TLS server sends about a client certificate.
_CERTIFICATE_ALERTS = {
    "SSLV3_ALERT_BAD_CERTIFICATE": "bad_certificate",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": "unsupported_certificate",
    "SSLV3_ALERT_CERTIFICATE_REVOKED": "certificate_revoked",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "certificate_expired",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "certificate_unknown",
    "TLSV1_ALERT_UNKNOWN_CA": "unknown_ca",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "certificate_required",
}


def certificate_alert(exc: ssl.SSLError | None) -> str | None:
    """The client-certificate alert the peer sent, if ``exc`` is one."""
    return _CERTIFICATE_ALERTS.get(getattr(exc, "reason", None) or "")
