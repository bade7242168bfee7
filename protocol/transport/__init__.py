"""Thin asyncio transports for the protocol session: QUIC (aioquic) and WebSocket (websockets).

Both give the application the same :class:`Link` (``send``, async iteration of session
events, bounded ``close``); see the "Transports" section of docs/protocol.md.
"""

from protocol.transport.errors import (
    ConnectFailed,
    HandshakeTimeout,
    SessionRejected,
    TransportError,
)
from protocol.transport.link import Link
from protocol.transport.quic import QuicServer, connect_quic, quic_handshake_succeeds, serve_quic
from protocol.transport.tls import (
    TLSCredentials,
    client_ssl_context,
    peer_node_name,
    server_ssl_context,
)
from protocol.transport.websocket import WebSocketServer, connect_websocket, serve_websocket

__all__ = [
    "ConnectFailed",
    "HandshakeTimeout",
    "Link",
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
]
