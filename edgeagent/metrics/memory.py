"""The metrics buffer's ``MetricsStorage`` in memory: for tests, benchmarks and agents
without a disk (the agent's is ``edgeagent.store.metrics.SQLiteMetricsStorage``, which also
has the tables and the size accounting both follow)."""

from __future__ import annotations

from collections.abc import Sequence

from edgeagent.errors import UsageError
from edgeagent.store.metrics import ROW_OVERHEAD_BYTES, SealedBatch, StoredSample, StreamState

__all__ = ["MemoryMetricsStorage"]


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
            raise UsageError("seal_batch() before create_stream()")
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
