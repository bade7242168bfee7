"""Frames and msgpack: messages to bytes and back (docs/protocol.md, "Frames").

A frame is a 4-byte big-endian payload length ``N`` followed by ``N`` bytes of msgpack: a
map ``{"k": kind, "s": seq, "b": body}``. ``s`` is present exactly on kinds that need an
ack. Unknown keys in the envelope and in a body are ignored (forward compatible).

``FrameDecoder`` is incremental: feed it whatever the transport delivered, then take frames
until it says it needs more. It reads each length prefix and checks it against the maximum
frame size *before* it waits for (and so buffers) that frame's payload, as websockets checks
``max_size`` while parsing a frame header, so a peer cannot make it hold more than one frame
of at most ``max_frame_size`` bytes plus one transport read.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from typing import Any

import msgpack

from protocol.errors import DecodeError, FrameTooLarge, InvalidMessage, UnknownKind
from protocol.messages import MAX_SEQ, REGISTRY, Message

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "FrameDecoder",
    "decode_payload",
    "encode",
]

HEADER_SIZE = 4
"""Bytes of the length prefix."""
DEFAULT_MAX_FRAME_SIZE = 4 * 1024 * 1024
"""Default maximum payload length (bytes): 4 MiB holds the largest ConfigMap or Secret
Kubernetes accepts (1 MiB) several times over, and bounds what a peer can make us buffer."""

_HEADER = struct.Struct(">I")
_MAX_LENGTH = 2**32 - 1
_packb = msgpack.packb
# One Packer per thread, reused: ``msgpack.packb`` builds a Packer (and its 256 KiB buffer)
# per call, which is a measurable share of the per-message cost. A Packer is not safe to
# share between threads, hence thread-local. Its buffer keeps the size of the largest frame
# the thread encoded (at most max_frame_size).
_packers = threading.local()
_unpackb = msgpack.unpackb


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of the protocol")


def encode(message: Message, seq: int | None = None, max_frame_size: int | None = None) -> bytes:
    """Encode one message as one frame (length prefix included).

    Args:
        message: the message.
        seq: its sequence number: required (1..2**64-1) when ``message.needs_ack``,
            forbidden otherwise.
        max_frame_size: if given, the largest payload (bytes) to produce.

    Returns:
        The frame bytes, ready to write to the transport.

    Raises:
        InvalidMessage: ``seq`` does not match the kind (``field="s"``), a value inside a
            body is not msgpack-serialisable (``field`` names the top-level body field), or
            the payload exceeds ``max_frame_size`` (``field="frame"``).
    """
    cls = message.__class__
    if cls.needs_ack:
        if seq is None or not 1 <= seq <= MAX_SEQ:
            raise InvalidMessage("s", f"{cls.kind} needs a seq in 1..2**64-1, got {seq!r}")
        envelope = {"k": cls.kind, "s": seq, "b": message._to_body()}
    else:
        if seq is not None:
            raise InvalidMessage("s", f"{cls.kind} does not take a seq")
        envelope = {"k": cls.kind, "b": message._to_body()}
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer()
    try:
        payload = packer.pack(envelope)  # a failed pack() resets the packer's buffer
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidMessage(_unpackable_field(message), f"cannot be encoded: {exc}") from exc
    size = len(payload)
    limit = _MAX_LENGTH if max_frame_size is None else max_frame_size
    if size > limit:
        raise InvalidMessage("frame", f"{cls.kind} encodes to {size} bytes, over {limit} bytes")
    return _HEADER.pack(size) + payload


def _unpackable_field(message: Message) -> str:
    """Find which body field msgpack refused (slow path, only after a failure)."""
    for name, value in message._to_body().items():
        try:
            _packb(value)
        except (TypeError, ValueError, OverflowError):
            return f"b.{name}"
    return "b"


def decode_payload(payload: bytes | bytearray | memoryview) -> tuple[int | None, Message]:
    """Decode one frame's payload (the bytes after the length prefix).

    Args:
        payload: the msgpack bytes of exactly one envelope.

    Returns:
        ``(seq, message)``; ``seq`` is ``None`` for kinds that need no ack.

    Raises:
        UnknownKind: a well-formed envelope with a kind tag this version does not know.
        DecodeError: anything else invalid; ``field`` names the envelope key (``"k"``,
            ``"s"``, ``"b"``), the body field (``"b.ref.uid"``), or ``"frame"`` when the
            payload is not one msgpack map.
    """
    try:
        envelope = _unpackb(payload, ext_hook=_no_ext, timestamp=1)
    except Exception as exc:  # msgpack raises ValueError, FormatError, StackError, ...
        raise DecodeError("frame", f"not valid msgpack ({type(exc).__name__}: {exc})") from exc
    if envelope.__class__ is not dict:
        raise DecodeError("frame", f"expected a map envelope, got {type(envelope).__name__}")
    kind = envelope.get("k")
    if kind.__class__ is not str:
        raise DecodeError("k", f"expected str, got {type(kind).__name__}")
    seq = envelope.get("s")
    if seq is not None and (seq.__class__ is not int or not 1 <= seq <= MAX_SEQ):
        raise DecodeError("s", f"expected a seq in 1..2**64-1, got {seq!r}"[:200], kind)
    cls = REGISTRY.get(kind)
    if cls is None:
        raise UnknownKind(kind, seq)
    if cls.needs_ack:
        if seq is None:
            raise DecodeError("s", "missing (this kind needs an ack)", kind)
    elif seq is not None:
        raise DecodeError("s", "not allowed (this kind needs no ack)", kind)
    body = envelope.get("b", _EMPTY)
    if body.__class__ is not dict:
        raise DecodeError("b", f"expected a map, got {type(body).__name__}", kind)
    return seq, cls._from_body(body)


_EMPTY: dict[Any, Any] = {}


class FrameDecoder:
    """Incremental frame decoder: bytes in, ``(seq, message)`` out.

    Use::

        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            seq, message = frame

    An ``UnknownKind`` or ``DecodeError`` consumes its frame: decoding can go on after it
    (the session goes on only after ``UnknownKind``). ``FrameTooLarge`` is final: the stream
    cannot be re-synchronised, every later call raises it again.

    Args:
        max_frame_size: the largest payload (bytes) accepted; a larger length prefix
            raises ``FrameTooLarge`` as soon as the prefix is read.
    """

    __slots__ = ("_buf", "_pos", "_too_large", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not 0 < max_frame_size <= _MAX_LENGTH:
            raise ValueError(f"max_frame_size must be in 1..{_MAX_LENGTH}, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._too_large: int | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes from the transport; then call ``next_frame()`` until it returns None.

        Raises:
            FrameTooLarge: an earlier length prefix was over the limit (the bytes are dropped).
        """
        if self._too_large is not None:
            raise FrameTooLarge(self._too_large, self.max_frame_size)
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def feed_frames(
        self, data: bytes | bytearray | memoryview
    ) -> tuple[list[bytes | bytearray | memoryview], FrameTooLarge | None]:
        """Buffer bytes and take the payload of every frame they complete, in one call.

        The session's receive path: one call per transport read instead of ``feed()`` then
        ``next_frame()`` until ``None``. Decode each payload with :func:`decode_payload`
        (errors are per frame, as from ``next_frame()``). When nothing is buffered, the
        payloads are views of ``data`` (no copy): decode them before ``data`` changes.

        Returns:
            ``(payloads, too_large)``: the payloads of the complete frames, oldest first,
            and ``FrameTooLarge`` if a length prefix over ``max_frame_size`` followed them
            (the stream is then broken, as with ``next_frame()``), else ``None``.
        """
        limit = self.max_frame_size
        if self._too_large is not None:
            return [], FrameTooLarge(self._too_large, limit)
        buf = self._buf
        if buf:  # a partial frame is waiting: complete it in the buffer (slices copy)
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            buf += data
            src: bytes | bytearray | memoryview = buf
        else:
            src = memoryview(data)  # the common case: whole frames, no copy
        payloads: list[bytes | bytearray | memoryview] = []
        pos, have = 0, len(src)
        unpack = _HEADER.unpack_from
        while have - pos >= HEADER_SIZE:
            (size,) = unpack(src, pos)
            if size > limit:
                self._too_large = size
                buf.clear()
                return payloads, FrameTooLarge(size, limit)
            end = pos + HEADER_SIZE + size
            if end > have:
                break
            payloads.append(src[pos + HEADER_SIZE : end])
            pos = end
        if src is buf:
            if pos == have:
                buf.clear()  # also gives the memory back: an idle session holds no buffer
            elif pos:
                del buf[:pos]
        elif pos < have:
            buf += src[pos:]  # the start of a frame: keep a copy until the rest comes
        return payloads, None

    def next_frame(self) -> tuple[int | None, Message] | None:
        """Decode the next complete frame.

        Returns:
            ``(seq, message)``, or ``None`` when more bytes are needed.

        Raises:
            FrameTooLarge: the next length prefix is over ``max_frame_size``.
            UnknownKind: the next frame has an unknown kind (the frame is consumed).
            DecodeError: the next frame is invalid (the frame is consumed).
        """
        buf = self._buf
        pos = self._pos
        have = len(buf) - pos
        if have < HEADER_SIZE:
            if self._too_large is not None:
                raise FrameTooLarge(self._too_large, self.max_frame_size)
            return None
        (size,) = _HEADER.unpack_from(buf, pos)
        if size > self.max_frame_size:
            self._too_large = size
            buf.clear()
            self._pos = 0
            raise FrameTooLarge(size, self.max_frame_size)
        end = pos + HEADER_SIZE + size
        if end > len(buf):
            return None
        payload = buf[pos + HEADER_SIZE : end]
        if end == len(buf):
            buf.clear()  # also gives the memory back: an idle session holds no buffer
            self._pos = 0
        else:
            self._pos = end
        return decode_payload(payload)

    def __iter__(self) -> Iterator[tuple[int | None, Message]]:
        """Yield complete frames until more bytes are needed (errors as ``next_frame``)."""
        while (frame := self.next_frame()) is not None:
            yield frame

    def check_eof(self) -> None:
        """Call when the byte stream has ended.

        Raises:
            FrameTooLarge: the stream was already broken by an oversized frame.
            DecodeError: it ended inside a frame (``field="frame"``, a truncated frame).
        """
        if self._too_large is not None:
            raise FrameTooLarge(self._too_large, self.max_frame_size)
        have = self.buffered
        if have:
            if have < HEADER_SIZE:
                detail = f"{have} of {HEADER_SIZE} length-prefix bytes"
            else:
                (size,) = _HEADER.unpack_from(self._buf, self._pos)
                detail = f"{have - HEADER_SIZE} of {size} payload bytes"
            raise DecodeError("frame", f"truncated frame: the stream ended after {detail}")
