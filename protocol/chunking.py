"""Send lanes and chunks: large messages never hold up small ones (sans-I/O).

Two pieces the session uses, with no I/O, no clock and no randomness:

- :class:`SendQueue` holds what the session has to send in three lanes, one per
  :class:`protocol.messages.Priority` (CONTROL, STATUS, BULK). A frame whose payload is over
  ``CHUNK_SIZE`` is cut, as it is pulled, into ``chunk`` frames (:class:`Chunk`) of at most
  ``CHUNK_SIZE`` data bytes. :meth:`SendQueue.pull` drains CONTROL first, then STATUS, then
  BULK, looking at the lanes again after every frame or chunk, so a ping, an ack or a pod
  status waits for at most one chunk of a 4 MiB ConfigMap, whatever the link's speed.
  Within a lane, order is kept (numbered messages ride STATUS, in seq order; the hub's
  upserts, deletes, ``twin_desired`` and ``sync_done`` ride BULK, in order).
- :class:`Reassembler` joins the chunks of each message back into one frame payload, with
  bounded memory: a message is refused (``ChunkRefused``) when its announced ``total`` is
  over ``max_message_size`` or over what the reassembly budget has left, *before* any of
  it is buffered; its later chunks are then skipped.

The limits are agreed at the handshake (:func:`agree_limits`): each side uses the smaller
of the two frame and message limits; a peer that announced none gets whole frames only.

The streams of day-2 operations (logs, exec) use the same mechanism: their data kinds
declare ``priority = Priority.BULK`` and carry at most a chunk each; their control kinds
(open, credit, cancel) declare ``Priority.CONTROL``. See /work/notes/transport-api.md.
"""

from __future__ import annotations

from collections import deque

from protocol.codec import DEFAULT_MAX_FRAME_SIZE, HEADER_SIZE, encode
from protocol.errors import DecodeError, RemoteProtocolError
from protocol.messages import Chunk, Priority

__all__ = [
    "CHUNK_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ChunkRefused",
    "Limits",
    "Reassembler",
    "SendQueue",
    "agree_limits",
]

CHUNK_SIZE = 16 * 1024
"""Data bytes per chunk. A frame of a higher lane waits for at most one chunk on the
wire: 16 KiB is 2 s on a 64 kbit/s link, well inside the 60 s liveness timeout."""
CHUNK_OVERHEAD = 96
"""Bytes a chunk frame adds around its data (header, envelope, the chunk's fields)."""
DEFAULT_MAX_MESSAGE_SIZE = 8 * 1024 * 1024
"""Largest message (bytes, reassembled) by default: five times Kubernetes' largest object
(etcd's 1.5 MiB request limit), and what the reassembly budget is counted in."""
MAX_PARTIAL = 8
"""Messages a reassembler keeps in progress at once (a sender has at most one per lane)."""
MAX_SKIPPED = 64
"""Refused messages whose remaining chunks a reassembler is still skipping."""

_LANES = tuple(Priority)


class ChunkRefused(RemoteProtocolError):
    """A chunked message the receiver will not reassemble; the session goes on.

    The session answers ``Error(TOO_LARGE, in_reply_to=seq)`` and acknowledges ``seq``
    (processed by refusing it), so the sender dead-letters it instead of resending it.

    Attributes:
        seq: the refused message's seq (0 if its kind is not numbered).
        reason: why, naming the sizes (bytes).
    """

    def __init__(self, seq: int, reason: str) -> None:
        super().__init__(reason)
        self.seq = seq
        self.reason = reason


class Limits:
    """What one session sends: the agreed frame and message limits (bytes).

    Attributes:
        max_frame_size: the largest frame payload we send.
        max_message_size: the largest message we send, chunked; 0 when the peer takes no
            chunks (then messages are limited to one frame).
    """

    __slots__ = ("max_frame_size", "max_message_size")

    def __init__(self, max_frame_size: int, max_message_size: int) -> None:
        self.max_frame_size = max_frame_size
        self.max_message_size = max_message_size

    @property
    def chunks(self) -> bool:
        """True if the peer reassembles chunks (and the frame limit leaves room for one)."""
        return self.max_message_size > 0 and self.max_frame_size > CHUNK_OVERHEAD

    @property
    def largest_message(self) -> int:
        """The largest frame payload ``SendQueue.put`` takes (bytes)."""
        return self.max_message_size if self.chunks else self.max_frame_size

    def __repr__(self) -> str:
        return f"Limits({self.max_frame_size}, {self.max_message_size})"


def agree_limits(
    ours_frame: int, ours_message: int, theirs_frame: int, theirs_message: int
) -> Limits:
    """The limits both sides use: the smaller of each (bytes).

    A peer that announced 0 predates the negotiation: its frame limit is taken as the
    protocol's default (4 MiB) and it gets no chunks (message limit 0).
    """
    frame = min(ours_frame, theirs_frame or DEFAULT_MAX_FRAME_SIZE)
    message = min(ours_message, theirs_message) if theirs_message and ours_message else 0
    return Limits(frame, message)


class _Chunked:
    """A frame payload on its way out as chunks (the head of its lane until done)."""

    __slots__ = ("id", "offset", "payload", "seq")

    def __init__(self, chunk_id: int, payload: memoryview, seq: int) -> None:
        self.id = chunk_id
        self.payload = payload
        self.offset = 0
        self.seq = seq


class SendQueue:
    """Three send lanes (CONTROL > STATUS > BULK), cutting large payloads into chunks.

    The BULK lane is fair-queued: a frame put with a ``flow`` (a day-2 stream's id) joins
    that flow's queue, and the flows (frames put without one are the one ``None`` flow)
    take turns, one whole message each, so an exec's one-byte echo waits for at most one
    message of a followed log, not for everything that log has queued. A flow keeps its
    own order; only one chunked message of the lane is in progress at a time (the
    receiver reassembles at most one per lane). Frames put with :meth:`put_last` (the
    session's close) leave after everything else queued.

    Lanes and flows are made when first used (an idle session holds none: 10,000
    sessions per hub).

    Args:
        limits: what we may send; :meth:`configure` replaces it after the handshake.
        chunk_size: data bytes per chunk (at most the frame limit minus the chunk's
            ``CHUNK_OVERHEAD``).
    """

    __slots__ = (
        "_chunk_size",
        "_chunked",
        "_chunks",
        "_flow_bytes",
        "_flows",
        "_lanes",
        "_largest",
        "_next_id",
        "_tail",
        "bytes",
        "limits",
    )

    def __init__(self, limits: Limits, chunk_size: int = CHUNK_SIZE) -> None:
        self._lanes: list[deque[bytes | _Chunked] | None] = [None, None]  # CONTROL, STATUS
        # BULK: flow -> its queue, in turn order (dicts keep insertion order; the flow
        # whose turn it is comes first), and flow -> its bytes queued
        self._flows: dict[object, deque[bytes | _Chunked]] | None = None
        self._flow_bytes: dict[object, int] | None = None
        self._tail: list[bytes] | None = None
        self._next_id = 0
        self._chunked = 0  # payloads queued as chunks (0: every lane holds whole frames)
        self._chunk_size = chunk_size
        self.bytes = 0
        """Bytes queued (whole frames, and what is left of chunked payloads)."""
        self.limits = limits
        self.configure(limits)

    def configure(self, limits: Limits) -> None:
        """Use the agreed limits from now on (what is queued is cut with them as pulled)."""
        self.limits = limits
        self._chunk_size = max(1, min(self._chunk_size, limits.max_frame_size - CHUNK_OVERHEAD))
        self._chunks = limits.chunks
        self._largest = limits.largest_message

    def backlog(self, priority: Priority) -> int:
        """Frames and chunked messages waiting in one lane (streams stop reading at a bound)."""
        if priority is Priority.BULK:
            flows = self._flows
            return 0 if flows is None else sum(len(q) for q in flows.values())
        lane = self._lanes[priority]
        return 0 if lane is None else len(lane)

    def flow_bytes(self, flow: object) -> int:
        """Bytes queued in one flow of the BULK lane (``None``: the frames put without one)."""
        counts = self._flow_bytes
        return 0 if counts is None else counts.get(flow, 0)

    def fits(self, payload_size: int) -> bool:
        """True if a frame with this payload (bytes) can be sent under the limits."""
        return payload_size <= self._largest

    def put(self, frame: bytes, priority: Priority, seq: int = 0, flow: object = None) -> None:
        """Queue one encoded frame (length prefix included) at the end of its lane (of its
        ``flow`` in the BULK lane; ignored in the others).

        A payload over the chunk size plus a chunk's own overhead is sent as chunks when
        the peer takes them (so a message carrying a chunk's worth of data, a full
        ``stream_data``, goes whole). Check :meth:`fits` first: a frame over the limits is
        a usage error of the caller.
        """
        if priority is Priority.BULK:
            flows = self._flows
            if flows is None:
                flows = self._flows = {}
                self._flow_bytes = {}
            lane = flows.get(flow)
            if lane is None:
                lane = flows[flow] = deque()
            counts = self._flow_bytes
            assert counts is not None
            counts[flow] = counts.get(flow, 0) + len(frame)
        else:
            lane = self._lanes[priority]
            if lane is None:
                lane = self._lanes[priority] = deque()
        if len(frame) - HEADER_SIZE > self._chunk_size + CHUNK_OVERHEAD and self._chunks:
            lane.append(_Chunked(-1, memoryview(frame)[HEADER_SIZE:], seq))
            self._chunked += 1
        else:
            lane.append(frame)
        self.bytes += len(frame)

    def put_last(self, frame: bytes) -> None:
        """Queue a frame to leave after everything else queued (whole, never chunked)."""
        if self._tail is None:
            self._tail = []
        self._tail.append(frame)
        self.bytes += len(frame)

    def pull(self, max_bytes: int | None = None) -> list[bytes]:
        """Take frames to write, highest lane first, one chunk at a time.

        Args:
            max_bytes: stop taking STATUS and BULK frames once this many bytes are taken
                (``None``: take everything; CONTROL frames are always all taken, so ``0``
                takes only those).

        Returns:
            The frames, in the order to write them.
        """
        lanes = self._lanes
        if not self.bytes:
            return []
        if max_bytes is None and not self._chunked:  # the common case: whole frames
            out: list[bytes] = []
            for i, lane in enumerate(lanes):
                if lane is not None:
                    out.extend(lane)  # type: ignore[arg-type]
                    lanes[i] = None  # an empty deque is ~600 bytes: idle sessions hold none
            if self._flows is not None:
                for lane in self._flows.values():  # all of it leaves in this one write
                    out.extend(lane)  # type: ignore[arg-type]
                self._flows = self._flow_bytes = None
            if self._tail is not None:
                out.extend(self._tail)
                self._tail = None
            self.bytes = 0
            return out
        out = []
        taken = 0
        control = lanes[0]
        if control is not None:
            # All of it, chunks included: a control payload over the chunk size (an exec's
            # stream_open with a long command line) is chunked like any other.
            while control:
                frame = self._take(control)
                out.append(frame)
                taken += len(frame)
            lanes[0] = None
        budget = None if max_bytes is None else max_bytes - taken
        while budget is None or budget > 0:
            status = lanes[1]
            if status:
                frame = self._take(status)
            elif self._flows:
                frame = self._take_bulk(self._flows)
            elif self._tail:
                frame = self._tail.pop(0)
                self.bytes -= len(frame)
            else:
                break
            out.append(frame)
            if budget is not None:
                budget -= len(frame)
        if lanes[1] is not None and not lanes[1]:
            lanes[1] = None
        if self._flows is not None and not self._flows:
            self._flows = self._flow_bytes = None
        if self._tail is not None and not self._tail:
            self._tail = None
        return out

    def _take_bulk(self, flows: dict[object, deque[bytes | _Chunked]]) -> bytes:
        """One frame or chunk of the flow whose turn it is; the turn passes on once its
        message is out (a chunked one is finished first)."""
        flow = next(iter(flows))
        lane = flows[flow]
        head = lane[0]
        before = self.bytes
        frame = self._take(lane)
        counts = self._flow_bytes
        assert counts is not None
        counts[flow] -= before - self.bytes
        if not lane:
            del flows[flow]
            del counts[flow]
        elif lane[0] is not head or not isinstance(head, _Chunked):
            # a whole message left: the next flow's turn
            del flows[flow]
            flows[flow] = lane
        return frame

    def _take(self, lane: deque[bytes | _Chunked]) -> bytes:
        head = lane[0]
        if isinstance(head, bytes):
            lane.popleft()
            self.bytes -= len(head)
            return head
        if head.id < 0:  # its first chunk: number it now, so ids leave in increasing order
            head.id = self._next_id
            self._next_id += 1
        start = head.offset
        end = min(start + self._chunk_size, len(head.payload))
        frame = encode(
            Chunk(head.id, start, len(head.payload), bytes(head.payload[start:end]), head.seq)
        )
        head.offset = end
        sent = end - start + (HEADER_SIZE if start == 0 else 0)
        self.bytes -= sent
        if end == len(head.payload):
            lane.popleft()
            self._chunked -= 1
        return frame


class Reassembler:
    """Joins chunks back into frame payloads, within a memory budget.

    Args:
        max_message_size: the largest payload (bytes) accepted.
        budget: bytes all messages in progress may reserve together (each reserves its
            ``total`` at its first chunk); ``3 * max_message_size`` if ``None`` (one
            message per sending lane).
    """

    __slots__ = ("_budget", "_last_id", "_partial", "_reserved", "_skipping", "max_message_size")

    def __init__(self, max_message_size: int, budget: int | None = None) -> None:
        self.max_message_size = max_message_size
        self._budget = 3 * max_message_size if budget is None else budget
        self._partial: dict[int, tuple[bytearray, int]] = {}  # id -> (data, total)
        self._skipping: dict[int, int] = {}  # refused id -> its total
        self._reserved = 0
        self._last_id = -1

    @property
    def reserved(self) -> int:
        """Bytes reserved by messages in progress (at most the budget)."""
        return self._reserved

    def feed(self, chunk: Chunk) -> bytes | None:
        """Take one chunk.

        Returns:
            The whole payload when this chunk completes it, else ``None``.

        Raises:
            ChunkRefused: the message is too large (refused at its first chunk; its later
                chunks return ``None``).
            DecodeError: the chunks break the rules (out of order, a total that changes,
                an id reused, too many messages in progress): the stream is unusable.
        """
        cid = chunk.id
        end = chunk.offset + len(chunk.data)
        skipped = self._skipping.get(cid)
        if skipped is not None:
            if chunk.total != skipped:
                raise DecodeError("b.total", f"chunk {cid}: total changed")
            if end == skipped:
                del self._skipping[cid]
            return None
        partial = self._partial.get(cid)
        if partial is None:
            return self._first(chunk, end)
        data, total = partial
        if chunk.total != total or chunk.offset != len(data):
            raise DecodeError(
                "b.offset", f"chunk {cid}: offset {chunk.offset}, expected {len(data)} of {total}"
            )
        data += chunk.data
        if end < total:
            return None
        del self._partial[cid]
        self._reserved -= total
        return bytes(data)

    def _first(self, chunk: Chunk, end: int) -> bytes | None:
        cid, total = chunk.id, chunk.total
        if cid <= self._last_id:
            raise DecodeError("b.id", f"chunk id {cid} is not new (last {self._last_id})")
        if chunk.offset != 0:
            raise DecodeError("b.offset", f"chunk {cid} starts at {chunk.offset}, not 0")
        self._last_id = cid
        refusal = None
        if total > self.max_message_size:
            refusal = f"a message of {total} bytes is over the {self.max_message_size}-byte limit"
        elif self._reserved + total > self._budget or len(self._partial) >= MAX_PARTIAL:
            refusal = (
                f"a message of {total} bytes does not fit the reassembly budget "
                f"({self._reserved} of {self._budget} bytes in use)"
            )
        if refusal is not None:
            if end < total:
                if len(self._skipping) >= MAX_SKIPPED:
                    raise DecodeError("b.id", "too many refused chunked messages in progress")
                self._skipping[cid] = total
            raise ChunkRefused(chunk.seq, refusal)
        if end == total:
            return chunk.data
        self._partial[cid] = (bytearray(chunk.data), total)
        self._reserved += total
        return None
