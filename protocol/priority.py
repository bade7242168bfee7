"""The send lanes a message kind declares (``Message.priority``); see ``protocol.chunking``."""

from __future__ import annotations

import enum

__all__ = ["Priority"]


class Priority(enum.IntEnum):
    """The send lane of a message kind (lower leaves first): CONTROL > STATUS > BULK.

    The session's send scheduler (:class:`protocol.chunking.SendQueue`) drains the lanes in
    this order at every chunk boundary, so a frame of a higher lane waits at most for the
    one chunk (at most ``protocol.chunking.CHUNK_SIZE`` bytes) being written. Numbered kinds
    (``needs_ack``) keep their seq order whatever their priority: they all ride the STATUS
    lane (the receiver's cumulative ack needs them in order), so a large numbered message
    holds the numbered ones sent after it until its last chunk is out, while CONTROL frames
    still pass between its chunks (tests/protocol/test_chunking.py).
    """

    CONTROL = 0
    """Session control (ack, ping, pong, close, chunk refusals) and small application
    control (a stream's open/credit/cancel): never queued behind status or bulk data."""
    STATUS = 1
    """Status and numbered messages (pod status, twins, events, metrics)."""
    BULK = 2
    """Large or many: objects (ConfigMaps, Secrets, pods) and stream data (logs, exec)."""
