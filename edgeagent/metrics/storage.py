"""The storage interface of the metrics store-and-forward buffer, and an in-memory one.

The agent store implements :class:`MetricsStorage` (:mod:`edgeagent.store.metrics`,
``Store.metrics()``) with these tables; every method is one transaction, so a ``kill -9``
at any instant leaves either the state before or the state after it::

    CREATE TABLE metrics_stream (
        id             INTEGER PRIMARY KEY CHECK (id = 1),  -- a single row
        stream_id      INTEGER NOT NULL,    -- random 32-bit id, made once per store
        next_batch_seq INTEGER NOT NULL     -- identity of the next sealed batch, from 1
                                            -- (the agent store keeps a reservation here:
                                            -- every seq below it may have been used)
    );
    CREATE TABLE metrics_sample (           -- sampled, not yet in a batch
        seq  INTEGER PRIMARY KEY,           -- sampling order; a merged sample keeps the
                                            -- later seq, so order by seq is time order
        data BLOB NOT NULL                  -- protocol.metrics_codec.encode_sample()
    );
    CREATE TABLE metrics_batch (            -- sealed, sent or not, not yet acknowledged
        batch_seq  INTEGER PRIMARY KEY,
        body       BLOB NOT NULL,           -- the metrics_batch message's `samples`, as sent
        samples    INTEGER NOT NULL,
        first_t_ms INTEGER NOT NULL,
        last_t_ms  INTEGER NOT NULL
    );

Size accounting (:meth:`MetricsStorage.size_bytes`) is the payload plus
``ROW_OVERHEAD_BYTES`` per row, ``sum(length(data)) + 32 * count(*)`` over both tables: a
SQLite row costs its record header, rowid and cell pointer (about 10 bytes) plus page
slack, and the figure must not depend on the page cache or WAL state to stay testable.
Deleted rows' pages are reused by later rows, so the file stays at the size of its peak
and the budget bounds that peak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from edgeagent.metrics.errors import MetricsError
from protocol.messages import MetricsBatch
from protocol.metrics_codec import to_samples_field

__all__ = [
    "ROW_OVERHEAD_BYTES",
    "MemoryMetricsStorage",
    "MetricsStorage",
    "SealedBatch",
    "StoredSample",
    "StreamState",
]

ROW_OVERHEAD_BYTES = 32


@dataclass(frozen=True, slots=True)
class StoredSample:
    """A sample in the buffer.

    Attributes:
        seq: its position; larger is later.
        data: the sample encoded with ``protocol.metrics_codec.encode_sample``.
    """

    seq: int
    data: bytes


@dataclass(frozen=True, slots=True)
class SealedBatch:
    """A batch with a fixed identity, kept until the hub acknowledges it.

    Attributes:
        batch_seq: its identity within the stream (with the stream id, which is inside
            ``body``); the same bytes are resent after a reconnect.
        body: the ``samples`` field of the ``metrics_batch`` message.
        samples: how many samples it holds.
        first_t_ms: time of its oldest sample (ms since the epoch).
        last_t_ms: time of its newest sample.
    """

    batch_seq: int
    body: bytes
    samples: int
    first_t_ms: int
    last_t_ms: int

    def message(self, node_name: str) -> MetricsBatch:
        """The ``metrics_batch`` message that carries this batch (send it with a seq)."""
        return MetricsBatch(node_name=node_name, samples=to_samples_field(self.body))


@dataclass(frozen=True, slots=True)
class StreamState:
    """The stream's identity and the next batch number."""

    stream_id: int
    next_batch_seq: int


class MetricsStorage(Protocol):
    """Persistent state of the metrics buffer; each method is atomic.

    The methods are synchronous: each touches a few rows of a few hundred bytes, every
    15 s (sampling) or 60 s (batching); a down-sampling pass rewrites a quarter of the
    buffer in one transaction.
    """

    def stream(self) -> StreamState | None:
        """Return the stream state, or ``None`` before :meth:`create_stream`."""
        ...

    def create_stream(self, state: StreamState) -> None:
        """Record the stream's identity (once, when the store is new)."""
        ...

    def append_sample(self, data: bytes) -> int:
        """Add a sample after all others; return its seq."""
        ...

    def samples(self, limit: int | None = None) -> list[StoredSample]:
        """Return the oldest ``limit`` samples (all if ``None``), oldest first."""
        ...

    def replace_samples(self, remove: Sequence[int], add: Sequence[StoredSample]) -> None:
        """Delete the samples with seqs in ``remove``, then insert or replace ``add``.

        Used by down-sampling: each merged sample takes the seq of the later of its two
        (``INSERT OR REPLACE`` of that row); and to discard samples (``add`` empty).
        """
        ...

    def seal_batch(self, batch: SealedBatch, sample_seqs: Sequence[int]) -> None:
        """Store ``batch``, delete the samples it holds, set ``next_batch_seq`` past it."""
        ...

    def batches(self) -> list[SealedBatch]:
        """Return the unacknowledged batches, oldest first."""
        ...

    def delete_batches(self, up_to: int) -> None:
        """Delete every batch with ``batch_seq <= up_to`` (the hub acknowledged them)."""
        ...

    def size_bytes(self) -> int:
        """Return payload bytes plus ``ROW_OVERHEAD_BYTES`` per sample and batch row."""
        ...


class MemoryMetricsStorage:
    """:class:`MetricsStorage` in memory: for tests, benchmarks and agents without a disk.

    Size is accounted exactly as the SQLite store does.
    """

    def __init__(self) -> None:
        self._stream: StreamState | None = None
        self._samples: dict[int, bytes] = {}
        self._batches: dict[int, SealedBatch] = {}
        self._next_seq = 1
        self._size = 0

    def stream(self) -> StreamState | None:
        return self._stream

    def create_stream(self, state: StreamState) -> None:
        self._stream = state

    def append_sample(self, data: bytes) -> int:
        seq = self._next_seq
        self._next_seq += 1
        self._samples[seq] = data
        self._size += len(data) + ROW_OVERHEAD_BYTES
        return seq

    def samples(self, limit: int | None = None) -> list[StoredSample]:
        seqs = sorted(self._samples)
        if limit is not None:
            seqs = seqs[:limit]
        return [StoredSample(s, self._samples[s]) for s in seqs]

    def replace_samples(self, remove: Sequence[int], add: Sequence[StoredSample]) -> None:
        for seq in remove:
            data = self._samples.pop(seq, None)
            if data is not None:
                self._size -= len(data) + ROW_OVERHEAD_BYTES
        for sample in add:
            old = self._samples.get(sample.seq)
            if old is not None:
                self._size -= len(old) + ROW_OVERHEAD_BYTES
            self._samples[sample.seq] = sample.data
            self._size += len(sample.data) + ROW_OVERHEAD_BYTES
            self._next_seq = max(self._next_seq, sample.seq + 1)

    def seal_batch(self, batch: SealedBatch, sample_seqs: Sequence[int]) -> None:
        if self._stream is None:
            raise MetricsError("seal_batch() before create_stream()")
        self.replace_samples(sample_seqs, ())
        self._batches[batch.batch_seq] = batch
        self._size += len(batch.body) + ROW_OVERHEAD_BYTES
        self._stream = StreamState(self._stream.stream_id, batch.batch_seq + 1)

    def batches(self) -> list[SealedBatch]:
        return [self._batches[s] for s in sorted(self._batches)]

    def delete_batches(self, up_to: int) -> None:
        for seq in [s for s in self._batches if s <= up_to]:
            self._size -= len(self._batches.pop(seq).body) + ROW_OVERHEAD_BYTES

    def size_bytes(self) -> int:
        return self._size
