"""The metrics store-and-forward buffer in the agent store: the SQLite ``MetricsStorage``.

Tables (migration ``m003_metrics_buffer``, docs/metrics.md): ``metrics_stream`` (the
stream identity and the next batch number), ``metrics_sample`` (unsealed samples),
``metrics_batch`` (sealed batches until the hub acknowledges them).

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
from typing import TYPE_CHECKING

from edgeagent.metrics.errors import MetricsError
from edgeagent.metrics.storage import ROW_OVERHEAD_BYTES, SealedBatch, StoredSample, StreamState

if TYPE_CHECKING:
    from edgeagent.store.store import Store

__all__ = ["BATCH_SEQ_BLOCK", "MetricsBacklog", "SQLiteMetricsStorage"]

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
            MetricsError: no stream yet (``create_stream`` first).
            StoreError: the commit failed: the batch, and the store's open batch with it,
                rolled back (the samples stay; nothing was sent).
        """
        rows = self._store._read("SELECT next_batch_seq FROM metrics_stream")
        if not rows:
            raise MetricsError("seal_batch() before create_stream()")
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
