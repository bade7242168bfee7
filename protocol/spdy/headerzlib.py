"""SPDY/3 header-block zlib streams that hold no zlib state between header blocks.

SPDY compresses every header block of one direction of a connection as one zlib stream
(seeded with the SPDY/3 dictionary, each block ended by a sync flush), so each side keeps an
inflater and a deflater for the connection's whole life. Those are the largest part of an
idle exec stream on the hub: an inflater holds a 32 KiB window plus ~7 KiB of state, a
deflater (even with our 512-byte window) ~6 KiB — while an exec or port-forward
connection exchanges header blocks only in its first milliseconds (one SYN_STREAM and one
SYN_REPLY per channel) and then carries data for hours.

So :class:`HeaderInflater` and :class:`HeaderDeflater` keep instead the stream's history —
the compressed bytes received, the raw blocks sent: a few hundred bytes — and, for each
new block, rebuild the zlib object by replaying the history, use it, and drop it. zlib is
deterministic, so a replayed deflater emits exactly the bytes the live one would, and the
peer, which keeps its own live stream, sees no difference. Once a history grows past
``replay_limit`` bytes (a connection opening many streams: port-forward with many ports)
replaying would cost more CPU than the state costs memory, and the object is kept live
from then on, as before.
"""

from __future__ import annotations

import zlib

from protocol.errors import RemoteProtocolError
from protocol.spdy.dictionary import HEADER_DICTIONARY

__all__ = ["REPLAY_LIMIT", "HeaderBlockError", "HeaderDeflater", "HeaderInflater"]

REPLAY_LIMIT = 4096
"""Bytes of history replayed for a new block before the zlib object is kept instead."""


class HeaderBlockError(RemoteProtocolError):
    """A header block that does not inflate, or inflates past the limit (the peer sent it)."""


def _inflater() -> zlib._Decompress:
    return zlib.decompressobj(zdict=HEADER_DICTIONARY)


def _deflater() -> zlib._Compress:
    # A 512-byte window and the smallest memLevel: our blocks are a few small replies
    # (the peer inflates any window size up to 32 KiB).
    return zlib.compressobj(
        zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 9, 1, zdict=HEADER_DICTIONARY
    )


class HeaderInflater:
    """The receiving direction's zlib stream.

    Args:
        max_bytes: the largest inflated block accepted (bytes).
        replay_limit: history bytes up to which no zlib state is kept between blocks.
    """

    __slots__ = ("_history", "_live", "max_bytes", "replay_limit")

    def __init__(self, max_bytes: int, *, replay_limit: int = REPLAY_LIMIT) -> None:
        self.max_bytes = max_bytes
        self.replay_limit = replay_limit
        self._history = bytearray()  # every compressed block so far, in order
        self._live: zlib._Decompress | None = None

    @property
    def holds_state(self) -> bool:
        """Whether a zlib object is kept between blocks (the history outgrew the limit)."""
        return self._live is not None

    def inflate(self, block: bytes) -> bytes:
        """The raw bytes of one compressed header block.

        Raises:
            HeaderBlockError: it does not inflate, or inflates past ``max_bytes`` (a zlib
                bomb); the connection is broken then (its stream cannot go on).
        """
        inflater = self._live
        if inflater is None:
            inflater = _inflater()
            if self._history:
                # Replayed bytes inflated before (each block to at most max_bytes): read
                # them back in max_bytes pieces so nothing large is ever held at once.
                pending = bytes(self._history)
                while pending:
                    inflater.decompress(pending, self.max_bytes)
                    pending = inflater.unconsumed_tail
        try:
            raw = inflater.decompress(block, self.max_bytes + 1)
        except zlib.error as exc:
            raise HeaderBlockError(f"a header block that does not inflate ({exc})") from exc
        if len(raw) > self.max_bytes or inflater.unconsumed_tail:
            raise HeaderBlockError(f"a header block over {self.max_bytes} bytes")
        self._history += block
        if self._live is None and len(self._history) > self.replay_limit:
            self._live = inflater
        return raw


class HeaderDeflater:
    """The sending direction's zlib stream.

    Args:
        replay_limit: history bytes up to which no zlib state is kept between blocks.
    """

    __slots__ = ("_history", "_live", "_size", "replay_limit")

    def __init__(self, *, replay_limit: int = REPLAY_LIMIT) -> None:
        self.replay_limit = replay_limit
        self._history: list[bytes] = []  # every raw block so far, in order
        self._size = 0
        self._live: zlib._Compress | None = None

    @property
    def holds_state(self) -> bool:
        """Whether a zlib object is kept between blocks (the history outgrew the limit)."""
        return self._live is not None

    def deflate(self, raw: bytes) -> bytes:
        """One header block, compressed and sync-flushed (as SPDY/3 section 2.6.10.1)."""
        deflater = self._live
        if deflater is None:
            deflater = _deflater()
            for old in self._history:  # same input, same flushes: same state
                deflater.compress(old)
                deflater.flush(zlib.Z_SYNC_FLUSH)
        block = deflater.compress(raw) + deflater.flush(zlib.Z_SYNC_FLUSH)
        if self._live is None:
            self._history.append(raw)
            self._size += len(raw)
            if self._size > self.replay_limit:
                self._live, self._history = deflater, []
        return block
