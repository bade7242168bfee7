"""Thin asyncio transports for the protocol session: QUIC (aioquic) and WebSocket (websockets).

Both give the application the same :class:`Link` (``send``, async iteration of session
events, bounded ``close``); see the "Transports" section of docs/protocol.md.

The names are imported on first use (PEP 562), not with the package: aioquic with
``cryptography`` costs about 14 MiB of RSS and websockets about 1.5 MiB, and an edge agent
on WebSocket should not pay for QUIC (``from protocol.transport import connect_websocket``
loads only the WebSocket adapter and what it needs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol.transport.errors import (
        CertificateRejected,
        ConnectFailed,
        HandshakeTimeout,
        SessionRejected,
        TransportError,
    )
    from protocol.transport.link import Link
    from protocol.transport.quic import (
        QuicServer,
        connect_quic,
        quic_handshake_succeeds,
        serve_quic,
    )
    from protocol.transport.tls import (
        PEMCredentials,
        TLSCredentials,
        client_ssl_context,
        peer_node_name,
        server_ssl_context,
        tls_credentials,
    )
    from protocol.transport.websocket import connect_websocket
    from protocol.transport.wsserver import WebSocketServer, serve_websocket

_WHERE = {
    "CertificateRejected": "errors",
    "ConnectFailed": "errors",
    "HandshakeTimeout": "errors",
    "SessionRejected": "errors",
    "TransportError": "errors",
    "Link": "link",
    "QuicServer": "quic",
    "connect_quic": "quic",
    "quic_handshake_succeeds": "quic",
    "serve_quic": "quic",
    "PEMCredentials": "tls",
    "TLSCredentials": "tls",
    "tls_credentials": "tls",
    "client_ssl_context": "tls",
    "peer_node_name": "tls",
    "server_ssl_context": "tls",
    "WebSocketServer": "wsserver",
    "connect_websocket": "websocket",
    "serve_websocket": "wsserver",
}

__all__ = [
    "CertificateRejected",
    "ConnectFailed",
    "HandshakeTimeout",
    "Link",
    "PEMCredentials",
    "QuicServer",
    "SessionRejected",
    "TLSCredentials",
    "TransportError",
    "WebSocketServer",
    "client_ssl_context",
    "connect_quic",
    "connect_websocket",
    "peer_node_name",
    "quic_handshake_succeeds",
    "serve_quic",
    "serve_websocket",
    "server_ssl_context",
    "tls_credentials",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
