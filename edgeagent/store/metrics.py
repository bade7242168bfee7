"""The metrics store-and-forward buffer in the agent store: its records, the
``MetricsStorage`` interface the forwarder (``edgeagent.metrics.MetricsForwarder``) keeps
its buffer through, and the SQLite implementation (the in-memory one is
``edgeagent.metrics.memory.MemoryMetricsStorage``).

Tables (migration ``m003_metrics_buffer``, docs/metrics.md); every method is one
transaction, so a ``kill -9`` at any instant leaves either the state before or the state
after it::
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

Every method is one transaction (a savepoint of the store's batch). When it is committed,
and why — the SD-card budget (an idle agent ≤ 1 MB written per hour) against what a crash
may lose:

- ``append_sample``, ``replace_samples``, ``delete_batches``: background writes, committed
  with the next commit or within ``background_commit_delay`` (5 min). A sample is
  acknowledged by nobody until it is in a batch the hub acknowledged, so a crash may lose
  the last minutes of samples, nothing else; an unrecorded ack makes a batch go again and
  the hub discards it by its identity.
- ``seal_batch``, ``create_stream``: committed before they return. A sealed batch is sent
  right after; if its seal could roll back, the same identity ``(stream_id, batch_seq)``
  could later name other samples and the hub would discard those as a duplicate, or its
  samples could be sealed again under another identity and counted twice.

Committing one sample every 15 s would cost 240 commits an hour of at least one 4 KiB
page each (plus WAL frame headers), about 1 MB/h on its own. While connected, a seal a
minute is the one commit that cannot wait; it writes two pages (the samples it takes, the
batch), because ``metrics_stream.next_batch_seq`` is kept as a *reservation*: every batch
seq below it may have been used, and it moves ``BATCH_SEQ_BLOCK`` ahead only once that
many seals have used it up (the next batch seq itself is kept in memory, and after a
restart numbering resumes at the reservation). The gap this leaves after a restart is
harmless: the hub keeps the highest batch seq per stream and drops anything at or below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from edgeagent.errors import UsageError
from protocol.messages import MetricsBatch
from protocol.metrics_codec import to_samples_field

if TYPE_CHECKING:
    from edgeagent.store.db import StoreCore as Store

__all__ = [
    "BATCH_SEQ_BLOCK",
    "ROW_OVERHEAD_BYTES",
    "MetricsBacklog",
    "MetricsStorage",
    "SQLiteMetricsStorage",
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


BATCH_SEQ_BLOCK = 64
"""Batch seqs reserved per write of ``metrics_stream`` (an hour of batches at the default
60 s interval)."""


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsBacklog:
    """What waits for the hub, for ``edgeagent status``.

    Attributes:
        samples: unsealed samples.
        batches: sealed batches not yet acknowledged.
        bytes: payload bytes plus per-row overhead of both (the figure the budget bounds).
        oldest_t_ms: time of the oldest sample held (ms since the epoch): the first of
            the oldest batch, else the oldest unsealed sample; ``None`` when empty.
    """

    samples: int
    batches: int
    bytes: int
    oldest_t_ms: int | None


class SQLiteMetricsStorage:
    """``edgeagent.metrics.MetricsStorage`` over the agent store. Get it with
    :meth:`Store.metrics`; use it from the event loop thread, like the store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._next_batch_seq: int | None = None  # in memory; the row holds the reservation

    def stream(self) -> StreamState | None:
        rows = self._store._read("SELECT stream_id, next_batch_seq FROM metrics_stream")
        if not rows:
            return None
        stream_id, reserved = rows[0]
        if self._next_batch_seq is None or self._next_batch_seq > reserved:
            # At open (or after a rollback): resume at the reservation, above anything used.
            self._next_batch_seq = reserved
        return StreamState(stream_id, self._next_batch_seq)

    def create_stream(self, state: StreamState) -> None:
        """Record the stream identity and commit it.

        Raises:
            StoreError: the commit failed (nothing recorded).
        """
        with self._store._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO metrics_stream (id, stream_id, next_batch_seq) "
                "VALUES (1, ?, ?)",
                (state.stream_id, state.next_batch_seq),
            )
        self._store.flush()
        self._next_batch_seq = state.next_batch_seq

    def append_sample(self, data: bytes) -> int:
        with self._store._write(background=True) as conn:
            cur = conn.execute("INSERT INTO metrics_sample (data) VALUES (?)", (data,))
            return int(cur.lastrowid or 0)

    def samples(self, limit: int | None = None) -> list[StoredSample]:
        sql = "SELECT seq, data FROM metrics_sample ORDER BY seq"
        rows = (
            self._store._read(sql + " LIMIT ?", (limit,))
            if limit is not None
            else self._store._read(sql)
        )
        return [StoredSample(seq, bytes(data)) for seq, data in rows]

    def replace_samples(self, remove: Sequence[int], add: Sequence[StoredSample]) -> None:
        with self._store._write(background=True) as conn:
            conn.executemany("DELETE FROM metrics_sample WHERE seq = ?", [(s,) for s in remove])
            conn.executemany(
                "INSERT OR REPLACE INTO metrics_sample (seq, data) VALUES (?, ?)",
                [(s.seq, s.data) for s in add],
            )

    def seal_batch(self, batch: SealedBatch, sample_seqs: Sequence[int]) -> None:
        """Store the batch, delete its samples, move the batch number on, and commit.

        Raises:
            UsageError: no stream yet (``create_stream`` first).
            StoreError: the commit failed: the batch, and the store's open batch with it,
                rolled back (the samples stay; nothing was sent).
        """
        rows = self._store._read("SELECT next_batch_seq FROM metrics_stream")
        if not rows:
            raise UsageError("seal_batch() before create_stream()")
        with self._store._write() as conn:
            if batch.batch_seq >= rows[0][0]:
                conn.execute(
                    "UPDATE metrics_stream SET next_batch_seq = ? WHERE id = 1",
                    (batch.batch_seq + BATCH_SEQ_BLOCK,),
                )
            conn.execute(
                "INSERT INTO metrics_batch (batch_seq, body, samples, first_t_ms, last_t_ms) "
                "VALUES (?, ?, ?, ?, ?)",
                (batch.batch_seq, batch.body, batch.samples, batch.first_t_ms, batch.last_t_ms),
            )
            conn.executemany(
                "DELETE FROM metrics_sample WHERE seq = ?", [(s,) for s in sample_seqs]
            )
        try:
            self._store.flush()
        except Exception:
            self._next_batch_seq = None  # rolled back: re-read the reservation
            raise
        self._next_batch_seq = max(self._next_batch_seq or 0, batch.batch_seq + 1)

    def batches(self) -> list[SealedBatch]:
        rows = self._store._read(
            "SELECT batch_seq, body, samples, first_t_ms, last_t_ms FROM metrics_batch "
            "ORDER BY batch_seq"
        )
        return [SealedBatch(s, bytes(b), n, f, last) for s, b, n, f, last in rows]

    def delete_batches(self, up_to: int) -> None:
        with self._store._write(background=True) as conn:
            conn.execute("DELETE FROM metrics_batch WHERE batch_seq <= ?", (up_to,))

    def size_bytes(self) -> int:
        (row,) = self._store._read(
            "SELECT (SELECT COALESCE(SUM(LENGTH(data)), 0) + ? * COUNT(*) FROM metrics_sample)"
            " + (SELECT COALESCE(SUM(LENGTH(body)), 0) + ? * COUNT(*) FROM metrics_batch)",
            (ROW_OVERHEAD_BYTES, ROW_OVERHEAD_BYTES),
        )
        return int(row[0])

    # -- beyond the MetricsStorage interface ---------------------------------------------

    def backlog(self) -> MetricsBacklog:
        """How much waits for the hub (read-only; for ``edgeagent status``)."""
        from protocol.metrics_codec import MetricsBodyError, decode_sample

        (row,) = self._store._read(
            "SELECT (SELECT COUNT(*) FROM metrics_sample), (SELECT COUNT(*) FROM metrics_batch), "
            "(SELECT MIN(first_t_ms) FROM metrics_batch)"
        )
        samples, batches, oldest = row
        if oldest is None and samples:
            first = self.samples(1)[0]
            try:
                oldest = decode_sample(first.data).t_ms
            except MetricsBodyError:
                oldest = None  # the forwarder discards it (and says so) when it meets it
        return MetricsBacklog(samples, batches, self.size_bytes(), oldest)
