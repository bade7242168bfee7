"""Kubernetes' port-forward protocol over SPDY (``portforward.k8s.io``), server side
(kubelet's half of ``kubectl port-forward``), sans-I/O.

For every connection the client accepted locally it opens two SPDY streams carrying the
same ``requestID`` and ``port`` headers: ``streamtype: error`` and ``streamtype: data``.
Once both are there (:class:`Pair`) the server connects to the pod's port and copies
bytes both ways on the data stream; a failure is written as text on the error stream.
The client's FIN on the data stream ends its direction; the server ends its own with
:meth:`PortForwardServer.close`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from protocol.spdy.connection import (
    DataReceived,
    GoAwayReceived,
    SpdyConnection,
    SpdyProtocolError,
    StreamOpened,
    StreamReset,
)

__all__ = ["PROTOCOL", "Closed", "Data", "Ended", "Pair", "PortForwardServer"]

PROTOCOL = "portforward.k8s.io"

_PORT = re.compile(r"[0-9]{1,5}")  # ASCII digits only: str.isdigit() takes "²", int() not

#: Connections (pairs) one port-forward connection may hold at once.
MAX_PAIRS = 128


@dataclass(frozen=True, slots=True)
class Pair:
    """A forwarded connection is complete: connect to ``port``."""

    request_id: str
    port: int


@dataclass(frozen=True, slots=True)
class Data:
    request_id: str
    data: bytes
    fin: bool


@dataclass(frozen=True, slots=True)
class Closed:
    """The client reset one forwarded connection."""

    request_id: str


@dataclass(frozen=True, slots=True)
class Ended:
    """The client went away (GOAWAY)."""


PortForwardEvent = Pair | Data | Closed | Ended


class PortForwardServer:
    """The server side of one port-forward connection (after the HTTP upgrade)."""

    def __init__(self) -> None:
        self.spdy = SpdyConnection(server=True)
        self._pending: dict[str, dict[str, int]] = {}  # request id -> streamtype -> stream
        self._pairs: dict[str, tuple[int, int, int]] = {}  # id -> (error, data, port)
        self._by_stream: dict[int, str] = {}

    def receive_data(self, data: bytes) -> list[PortForwardEvent]:
        """Feed bytes from the client.

        Raises:
            SpdyProtocolError: broken framing, a stream without ``requestID``/``port``, a
                port out of range, a duplicate stream, too many connections.
        """
        events: list[PortForwardEvent] = []
        for event in self.spdy.receive_data(data):
            if isinstance(event, StreamOpened):
                events += self._opened(event)
            elif isinstance(event, DataReceived):
                request_id = self._by_stream.get(event.stream_id)
                pair = self._pairs.get(request_id or "")
                if pair is not None and event.stream_id == pair[1]:
                    events.append(Data(request_id or "", event.data, event.fin))
            elif isinstance(event, StreamReset):
                request_id = self._by_stream.get(event.stream_id)
                if request_id is not None:
                    events.append(Closed(request_id))
            elif isinstance(event, GoAwayReceived):
                events.append(Ended())
        return events

    def _opened(self, event: StreamOpened) -> list[PortForwardEvent]:
        headers = event.headers
        kind = (headers.get("streamtype") or [""])[0]
        request_id = (headers.get("requestid") or [""])[0]
        port_text = (headers.get("port") or [""])[0]
        if kind not in ("error", "data") or not request_id or not _PORT.fullmatch(port_text):
            self.spdy.closed = True
            raise SpdyProtocolError("a port-forward stream needs streamtype, requestID and port")
        port = int(port_text)
        if not 0 < port <= 65535:
            self.spdy.closed = True
            raise SpdyProtocolError(f"port {port} is out of range")
        pending = self._pending.setdefault(request_id, {})
        if kind in pending or request_id in self._pairs:
            self.spdy.closed = True
            raise SpdyProtocolError(f"a second {kind} stream for request {request_id}")
        if len(self._pairs) + len(self._pending) > MAX_PAIRS:
            self.spdy.closed = True
            raise SpdyProtocolError(f"more than {MAX_PAIRS} forwarded connections at once")
        pending[kind] = event.stream_id
        self._by_stream[event.stream_id] = request_id
        self.spdy.reply(event.stream_id)
        if len(pending) == 2:
            del self._pending[request_id]
            self._pairs[request_id] = (pending["error"], pending["data"], port)
            return [Pair(request_id, port)]
        return []

    def write(self, request_id: str, data: bytes) -> None:
        """Bytes from the pod's port to the client."""
        pair = self._pairs.get(request_id)
        if pair is not None and data:
            self.spdy.send_data(pair[1], data)

    def error(self, request_id: str, message: str) -> None:
        """Tell the client this connection failed (kubectl prints it)."""
        pair = self._pairs.get(request_id)
        if pair is not None:
            self.spdy.send_data(pair[0], message.encode())

    def close(self, request_id: str) -> None:
        """The pod's side ended: close our halves of the connection's streams."""
        pair = self._pairs.pop(request_id, None)
        if pair is not None:
            self.spdy.send_data(pair[1], b"", fin=True)
            self.spdy.send_data(pair[0], b"", fin=True)

    def data_to_send(self) -> bytes:
        return self.spdy.data_to_send()
