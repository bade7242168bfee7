"""SPDY/3.1 framing, sans-I/O: what ``kubectl`` 1.20 and kube-apiserver speak for exec,
attach and port-forward (Go's ``moby/spdystream``), server side and client side.

Feed received bytes to :meth:`SpdyConnection.receive_data`, which returns events; call the
methods that send (``reply``, ``send_data``, ``reset``, ``goaway``...) and write
:meth:`SpdyConnection.data_to_send` to the socket. No I/O, no clock.

Frames (all integers big-endian): a control frame is ``1 | version(15) | type(16) |
flags(8) | length(24) | payload``, a data frame ``0 | stream id(31) | flags(8) |
length(24) | data``. Header blocks (SYN_STREAM, SYN_REPLY, HEADERS) are a count and
length-prefixed names and values, compressed with one zlib stream per direction for the
whole connection, seeded with :data:`~protocol.spdy.dictionary.HEADER_DICTIONARY` (kept as
a short history, not as zlib state, between blocks: ``protocol.spdy.headerzlib``).

Limits, all answered with GOAWAY(PROTOCOL_ERROR) and :class:`SpdyProtocolError`: a frame
longer than ``max_frame_bytes``, a version other than 3, a header block that does not
inflate or inflates past ``max_header_bytes`` (a zlib bomb), a malformed block, a
SYN_STREAM reusing or going back on a stream id or with the wrong parity. Data for an
unknown or reset stream is answered RST_STREAM(INVALID_STREAM) (the peer may not know yet).
SPDY's WINDOW_UPDATE flow control is not enforced (spdystream does not use it); SETTINGS are
accepted and ignored; PINGs are answered.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.errors import ProtocolError
from protocol.spdy.headerzlib import HeaderBlockError, HeaderDeflater, HeaderInflater

__all__ = [
    "FLAG_FIN",
    "DataReceived",
    "GoAwayReceived",
    "Headers",
    "RstStatus",
    "SpdyConnection",
    "SpdyEvent",
    "SpdyProtocolError",
    "StreamOpened",
    "StreamReplied",
    "StreamReset",
]

VERSION = 3
FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = (
    1,
    2,
    3,
    4,
    6,
    7,
    8,
    9,
)

Headers = dict[str, list[str]]
"""Header name (lower case) -> its values (SPDY joins several with NUL)."""


class RstStatus:
    """RST_STREAM status codes."""

    PROTOCOL_ERROR = 1
    INVALID_STREAM = 2
    REFUSED_STREAM = 3
    CANCEL = 5
    INTERNAL_ERROR = 6
    STREAM_IN_USE = 8
    STREAM_ALREADY_CLOSED = 9


class SpdyProtocolError(ProtocolError):
    """The peer broke the framing; the connection is over (a GOAWAY is queued)."""


@dataclass(frozen=True, slots=True)
class StreamOpened:
    stream_id: int
    headers: Headers
    fin: bool


@dataclass(frozen=True, slots=True)
class StreamReplied:
    stream_id: int
    headers: Headers
    fin: bool


@dataclass(frozen=True, slots=True)
class DataReceived:
    stream_id: int
    data: bytes
    fin: bool


@dataclass(frozen=True, slots=True)
class StreamReset:
    stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class GoAwayReceived:
    last_stream_id: int
    status: int


SpdyEvent = StreamOpened | StreamReplied | DataReceived | StreamReset | GoAwayReceived


class SpdyConnection:
    """One SPDY/3.1 connection.

    Args:
        server: this side accepted the connection (its streams are even, the peer's odd).
        max_frame_bytes: the longest frame payload accepted (data frames are split to it
            on sending too).
        max_header_bytes: the largest inflated header block accepted.
    """

    # one per open exec/attach/port-forward connection, mostly idle: no __dict__
    __slots__ = (
        "_buffer",
        "_deflate",
        "_inflate",
        "_last_peer_stream",
        "_next_stream",
        "_open",
        "_out",
        "closed",
        "max_frame_bytes",
        "max_header_bytes",
        "server",
    )

    def __init__(
        self, *, server: bool, max_frame_bytes: int = 1 << 20, max_header_bytes: int = 64 << 10
    ) -> None:
        self.server = server
        self.max_frame_bytes = max_frame_bytes
        self.max_header_bytes = max_header_bytes
        self._buffer = bytearray()
        self._out = bytearray()
        # no zlib state between header blocks: see protocol.spdy.headerzlib
        self._inflate = HeaderInflater(max_header_bytes)
        self._deflate = HeaderDeflater()
        self._open: list[int] = []  # streams that may still carry data (a few: no set)
        self._last_peer_stream = 0
        self._next_stream = 2 if server else 1
        self.closed = False

    # -- receiving --------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[SpdyEvent]:
        """Feed bytes from the peer; returns the events of every complete frame.

        Raises:
            SpdyProtocolError: the peer broke the framing (a GOAWAY is queued; drop the
                connection after sending it).
        """
        if self.closed:
            return []
        buf = self._buffer
        buf += data
        events: list[SpdyEvent] = []
        while len(buf) >= 8:
            length = int.from_bytes(buf[5:8], "big")
            if length > self.max_frame_bytes:
                self._fail(f"a {length}-byte frame (at most {self.max_frame_bytes})")
            if len(buf) < 8 + length:
                break
            head = bytes(buf[:8])
            payload = bytes(buf[8 : 8 + length])
            del buf[: 8 + length]
            flags = head[4]
            if head[0] & 0x80:
                version = int.from_bytes(head[0:2], "big") & 0x7FFF
                if version != VERSION:
                    self._fail(f"SPDY version {version} (only 3 is spoken)")
                kind = int.from_bytes(head[2:4], "big")
                event = self._control(kind, flags, payload)
            else:
                stream_id = int.from_bytes(head[0:4], "big") & 0x7FFFFFFF
                event = self._data(stream_id, flags, payload)
            if event is not None:
                events.append(event)
        return events

    def _forget(self, stream_id: int) -> None:
        if stream_id in self._open:
            self._open.remove(stream_id)

    def _fail(self, reason: str) -> None:
        self.goaway(status=1)
        self.closed = True
        raise SpdyProtocolError(f"malformed SPDY: {reason}")

    def _data(self, stream_id: int, flags: int, payload: bytes) -> SpdyEvent | None:
        if stream_id == 0:
            self._fail("a data frame on stream 0")
        if stream_id not in self._open:
            self.reset(stream_id, RstStatus.INVALID_STREAM)
            return None
        fin = bool(flags & FLAG_FIN)
        if fin:
            self._forget(stream_id)
        return DataReceived(stream_id, payload, fin)

    def _control(self, kind: int, flags: int, payload: bytes) -> SpdyEvent | None:
        fin = bool(flags & FLAG_FIN)
        if kind == SYN_STREAM:
            if len(payload) < 10:
                self._fail("a short SYN_STREAM")
            stream_id = int.from_bytes(payload[0:4], "big") & 0x7FFFFFFF
            if stream_id == 0 or (stream_id % 2 == 0) == self.server:
                self._fail(f"SYN_STREAM with stream id {stream_id} (wrong parity)")
            if stream_id <= self._last_peer_stream:
                self._fail(f"SYN_STREAM with stream id {stream_id} after {self._last_peer_stream}")
            self._last_peer_stream = stream_id
            headers = self._headers(payload[10:])
            if not fin:
                self._open.append(stream_id)
            return StreamOpened(stream_id, headers, fin)
        if kind in (SYN_REPLY, HEADERS):
            if len(payload) < 4:
                self._fail("a short SYN_REPLY/HEADERS")
            stream_id = int.from_bytes(payload[0:4], "big") & 0x7FFFFFFF
            headers = self._headers(payload[4:])
            return StreamReplied(stream_id, headers, fin) if kind == SYN_REPLY else None
        if kind == RST_STREAM:
            if len(payload) != 8:
                self._fail("a RST_STREAM that is not 8 bytes")
            stream_id = int.from_bytes(payload[0:4], "big") & 0x7FFFFFFF
            self._forget(stream_id)
            return StreamReset(stream_id, int.from_bytes(payload[4:8], "big"))
        if kind == PING:
            if len(payload) != 4:
                self._fail("a PING that is not 4 bytes")
            ping_id = int.from_bytes(payload, "big")
            if (ping_id % 2 == 0) == self.server:  # the peer's: echo it
                self._control_frame(PING, 0, payload)
            return None
        if kind == GOAWAY:
            if len(payload) < 4:
                self._fail("a short GOAWAY")
            last = int.from_bytes(payload[0:4], "big") & 0x7FFFFFFF
            status = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else 0
            return GoAwayReceived(last, status)
        if kind in (SETTINGS, WINDOW_UPDATE):
            return None  # accepted; SPDY flow control is not used by spdystream
        return None  # unknown control frames are ignored, as the draft says

    def _headers(self, block: bytes) -> Headers:
        try:
            raw = self._inflate.inflate(block)
        except HeaderBlockError as exc:
            self._fail(str(exc))
        headers: Headers = {}
        try:
            (count,) = struct.unpack_from(">I", raw, 0)
            pos = 4
            for _ in range(count):
                (size,) = struct.unpack_from(">I", raw, pos)
                name = raw[pos + 4 : pos + 4 + size]
                pos += 4 + size
                (size,) = struct.unpack_from(">I", raw, pos)
                value = raw[pos + 4 : pos + 4 + size]
                pos += 4 + size
                if pos > len(raw):
                    raise struct.error("past the end")
                headers.setdefault(name.decode().lower(), []).extend(value.decode().split("\0"))
        except (struct.error, UnicodeDecodeError) as exc:
            self._fail(f"a malformed header block ({exc})")
        if pos != len(raw):
            self._fail("trailing bytes after a header block")
        return headers

    # -- sending ------------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """The bytes queued for the peer (and forget them)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def _control_frame(self, kind: int, flags: int, payload: bytes) -> None:
        head = (0x8000 | VERSION).to_bytes(2, "big") + kind.to_bytes(2, "big")
        self._out += head + bytes([flags]) + len(payload).to_bytes(3, "big") + payload

    def _block(self, headers: Headers) -> bytes:
        raw = bytearray(len(headers).to_bytes(4, "big"))
        for name, values in headers.items():
            n = name.lower().encode()
            v = "\0".join(values).encode()
            raw += len(n).to_bytes(4, "big") + n + len(v).to_bytes(4, "big") + v
        return self._deflate.deflate(bytes(raw))

    def open_stream(self, headers: Headers, *, fin: bool = False) -> int:
        """Client side of a stream (SYN_STREAM); returns its id."""
        stream_id = self._next_stream
        self._next_stream += 2
        payload = stream_id.to_bytes(4, "big") + bytes(4) + bytes(2) + self._block(headers)
        self._control_frame(SYN_STREAM, FLAG_FIN if fin else 0, payload)
        self._open.append(stream_id)
        return stream_id

    def reply(self, stream_id: int, headers: Headers | None = None, *, fin: bool = False) -> None:
        """Accept a peer's stream (SYN_REPLY)."""
        payload = stream_id.to_bytes(4, "big") + self._block(headers or {})
        self._control_frame(SYN_REPLY, FLAG_FIN if fin else 0, payload)

    def send_data(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        """Data on a stream, split to ``max_frame_bytes``; ``fin`` ends our half."""
        view = memoryview(data)
        while True:
            part, view = view[: self.max_frame_bytes], view[self.max_frame_bytes :]
            last = not view
            flags = FLAG_FIN if (fin and last) else 0
            self._out += stream_id.to_bytes(4, "big") + bytes([flags])
            self._out += len(part).to_bytes(3, "big") + part
            if last:
                return

    def reset(self, stream_id: int, status: int = RstStatus.CANCEL) -> None:
        """Abort a stream (RST_STREAM)."""
        self._forget(stream_id)
        self._control_frame(RST_STREAM, 0, stream_id.to_bytes(4, "big") + status.to_bytes(4, "big"))

    def ping(self, ping_id: int) -> None:
        """A PING (odd ids from clients, even from servers)."""
        self._control_frame(PING, 0, ping_id.to_bytes(4, "big"))

    def goaway(self, status: int = 0) -> None:
        """No new streams (GOAWAY, status 0 OK, 1 PROTOCOL_ERROR, 2 INTERNAL_ERROR)."""
        payload = self._last_peer_stream.to_bytes(4, "big") + status.to_bytes(4, "big")
        self._control_frame(GOAWAY, 0, payload)
