"""Store-and-forward of samples: a bounded buffer, sealed batches, at-least-once delivery.

Pure logic over a :class:`~edgeagent.store.metrics.MetricsStorage`; no clock, no I/O of
its own. The life of a sample:

1. :meth:`MetricsForwarder.add` stores it. If the buffer is over its byte budget, the
   oldest half of the unsealed samples is halved in resolution (adjacent pairs merged,
   :mod:`edgeagent.metrics.downsample`), repeatedly, until it fits; once every old sample
   is as coarse as ``max_window_s`` allows, the oldest are dropped (and counted).
2. While connected, :meth:`MetricsForwarder.seal` takes the oldest samples into a batch
   with a fixed identity ``(stream id, batch seq)`` and keeps it until acknowledged. At
   most ``max_in_flight`` batches are sealed at a time, so everything else stays
   down-samplable if the link goes away again.
3. The caller sends each sealed batch; after a reconnect it sends
   :meth:`MetricsForwarder.unacked` again, oldest first, with the same bytes. The hub
   acknowledges by batch seq (:meth:`MetricsForwarder.acked`), and drops a batch whose
   seq it already accepted: delivery is at least once, oldest first, de-duplicated.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edgeagent.metrics.downsample import merge_samples, pairs_to_merge
from edgeagent.metrics.errors import MetricsError
from edgeagent.metrics.settings import MetricsSettings
from edgeagent.store.metrics import (
    ROW_OVERHEAD_BYTES,
    MetricsStorage,
    SealedBatch,
    StoredSample,
    StreamState,
)
from protocol.metrics_codec import (
    Batch,
    MetricsBodyError,
    Sample,
    decode_sample,
    encode_batch,
    encode_sample,
)

__all__ = [
    "ROW_OVERHEAD_BYTES",
    "ForwarderStats",
    "MetricsForwarder",
    "MetricsStorage",
    "SealedBatch",
    "StoredSample",
    "StreamState",
]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ForwarderStats:
    """Counters of what the buffer had to do since the agent started.

    Attributes:
        downsample_passes: times the oldest half was halved.
        merged_samples: samples removed by merging (each merge removes one).
        dropped_samples: samples dropped because nothing could be merged any more.
        corrupt_samples: stored samples that did not decode and were discarded.
    """

    downsample_passes: int = 0
    merged_samples: int = 0
    dropped_samples: int = 0
    corrupt_samples: int = 0


class MetricsForwarder:
    """The store-and-forward buffer of one agent.

    Args:
        storage: where samples and sealed batches live (the agent store, or
            :class:`~edgeagent.metrics.memory.MemoryMetricsStorage`).
        settings: budget, batch size, in-flight limit, coarsest window.
    """

    def __init__(self, storage: MetricsStorage, settings: MetricsSettings) -> None:
        self._storage = storage
        self._settings = settings
        self._max_window_ms = int(settings.max_window_s * 1000)
        self.stats = ForwarderStats()
        if storage.stream() is None:
            storage.create_stream(StreamState(secrets.randbits(32), 1))

    @property
    def stream_id(self) -> int:
        """The 32-bit id of this agent's metrics stream."""
        return self._state().stream_id

    def _state(self) -> StreamState:
        state = self._storage.stream()
        if state is None:
            raise MetricsError("the metrics storage lost its stream state")
        return state

    def add(self, sample: Sample) -> None:
        """Buffer one sample, down-sampling older ones to stay within the budget.

        Args:
            sample: the newest sample (later than every buffered one).

        Raises:
            protocol.errors.InvalidMessage: the sample cannot be encoded (a sampler bug).
        """
        self._storage.append_sample(encode_sample(sample))
        self._enforce_budget()

    def backlog(self) -> int:
        """Return how many samples are buffered and not yet sealed."""
        return len(self._storage.samples())

    def seal(self) -> SealedBatch | None:
        """Seal the oldest buffered samples into the next batch.

        Returns:
            The batch (store it is already done; send it now), or ``None`` when nothing
            is buffered or ``max_in_flight`` batches await their ack.
        """
        if len(self._storage.batches()) >= self._settings.max_in_flight:
            return None
        stored = self._storage.samples(self._settings.batch_max_samples)
        samples = []
        seqs = []
        for item in stored:
            sample = self._decode(item)
            seqs.append(item.seq)
            if sample is not None:
                samples.append(sample)
        if not samples:
            if seqs:
                self._storage.replace_samples(seqs, ())
            return None
        state = self._state()
        body = encode_batch(Batch(state.stream_id, state.next_batch_seq, tuple(samples)))
        batch = SealedBatch(
            batch_seq=state.next_batch_seq,
            body=body,
            samples=len(samples),
            first_t_ms=samples[0].t_ms,
            last_t_ms=samples[-1].t_ms,
        )
        self._storage.seal_batch(batch, seqs)
        return batch

    def unacked(self) -> list[SealedBatch]:
        """Return the sealed batches not yet acknowledged, oldest first (to resend)."""
        return self._storage.batches()

    def acked(self, batch_seq: int) -> None:
        """Forget every batch up to ``batch_seq``: the hub has it.

        Batches are delivered in order, so an ack covers the earlier ones too.
        """
        self._storage.delete_batches(batch_seq)

    # --- budget -----------------------------------------------------------------------------

    def _decode(self, item: StoredSample) -> Sample | None:
        try:
            return decode_sample(item.data)
        except MetricsBodyError as exc:
            self.stats.corrupt_samples += 1
            log.error("metrics: stored sample %d does not decode (%s); discarded", item.seq, exc)
            return None

    def _enforce_budget(self) -> None:
        budget = self._settings.budget_bytes
        while self._storage.size_bytes() > budget:
            stored = self._storage.samples()
            if len(stored) < 2:
                return  # only sealed batches are left: they go as soon as acknowledged
            # Decode lazily: a pass looks at the oldest quarter or so, not the whole buffer.
            decoded: dict[int, Sample] = {}

            def window(i: int, stored: list[StoredSample] = stored, cache=decoded) -> int:
                sample = cache.get(i)
                if sample is None:
                    sample = self._decode(stored[i])
                    if sample is None:
                        raise _CorruptSample(stored[i].seq)
                    cache[i] = sample
                return sample.window_ms

            try:
                pairs = pairs_to_merge(_Lazy(len(stored), window), self._max_window_ms)
            except _CorruptSample as corrupt:
                self._storage.replace_samples([corrupt.seq], ())
                continue
            if not pairs:
                self._storage.replace_samples([stored[0].seq], ())
                self.stats.dropped_samples += 1
                continue
            remove: list[int] = []
            add: list[StoredSample] = []
            for i in pairs:
                window(i + 1)  # make sure both halves are decoded
                merged = merge_samples(decoded[i], decoded[i + 1])
                remove.append(stored[i].seq)
                add.append(StoredSample(stored[i + 1].seq, encode_sample(merged)))
            self._storage.replace_samples(remove, add)
            self.stats.downsample_passes += 1
            self.stats.merged_samples += len(pairs)


class _CorruptSample(Exception):
    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class _Lazy(Sequence[int]):
    """A read-only sequence whose items are computed on first access."""

    def __init__(self, length: int, get: Callable[[int], int]) -> None:
        self._length = length
        self._get = get

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(self._length))]
        if not 0 <= index < self._length:
            raise IndexError(index)
        return self._get(index)
