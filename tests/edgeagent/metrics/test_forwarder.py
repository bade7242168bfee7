"""Down-sampling and the store-and-forward buffer (budget, sealing, acks, restarts)."""

from __future__ import annotations

import pytest

from edgeagent.metrics import (
    ROW_OVERHEAD_BYTES,
    MemoryMetricsStorage,
    MetricsForwarder,
    MetricsSettings,
    MetricsSettingsError,
    StoredSample,
)
from edgeagent.metrics.downsample import merge_samples, pairs_to_merge
from protocol.metrics_codec import Metric, Sample, decode_batch, encode_sample
from tests.bench.bench_metrics import typical_node_samples

M = Metric
CPU = (M.NODE_CPU_USAGE_MS, None)
AVAIL = (M.NODE_MEMORY_AVAILABLE_KIB, None)


def test_merge_sums_counters_and_weights_gauges_by_window() -> None:
    older = Sample(1_000, 10_000, {CPU: 100, AVAIL: 1000, (M.NODE_LOAD1_CENTI, None): 5})
    newer = Sample(31_000, 30_000, {CPU: 900, AVAIL: 2000, (M.NODE_UPTIME_SECONDS, None): 9})
    merged = merge_samples(older, newer)
    assert merged.t_ms == 31_000
    assert merged.window_ms == 40_000
    assert merged.values[CPU] == 1000
    assert merged.values[AVAIL] == 1750  # (1000 * 10 + 2000 * 30) / 40
    assert merged.values[(M.NODE_LOAD1_CENTI, None)] == 5
    assert merged.values[(M.NODE_UPTIME_SECONDS, None)] == 9


def test_merge_with_a_first_sample_of_zero_window() -> None:
    merged = merge_samples(Sample(0, 0, {AVAIL: 10}), Sample(15_000, 15_000, {AVAIL: 20, CPU: 3}))
    assert merged.window_ms == 15_000
    assert merged.values == {AVAIL: 20, CPU: 3}


@pytest.mark.parametrize(
    ("windows", "max_window", "expected"),
    [
        ([15] * 8, 3600, [0, 2]),  # half of the oldest half: two pairs of eight
        ([15] * 3, 3600, [0]),
        ([15], 3600, []),
        ([60, 60, 15, 15, 15, 15, 15, 15], 60, [2, 4]),  # the coarsest are stepped over
        ([60, 30, 30, 15], 60, [1]),
        ([60, 60, 60, 60], 60, []),  # nothing can merge any more
    ],
)
def test_pairs_to_merge(windows: list[int], max_window: int, expected: list[int]) -> None:
    assert pairs_to_merge(windows, max_window) == expected


def test_settings_are_validated() -> None:
    with pytest.raises(MetricsSettingsError, match="budget_bytes"):
        MetricsSettings(budget_bytes=1000)
    with pytest.raises(MetricsSettingsError, match="max_window_s"):
        MetricsSettings(max_window_s=1)
    with pytest.raises(MetricsSettingsError, match="sample_interval_s"):
        MetricsSettings(sample_interval_s=0)
    with pytest.raises(MetricsSettingsError, match="batch_interval_s"):
        MetricsSettings(batch_interval_s=5)
    with pytest.raises(MetricsSettingsError, match="max_in_flight"):
        MetricsSettings(max_in_flight=0)


def test_seal_takes_the_oldest_and_respects_in_flight_limit() -> None:
    storage = MemoryMetricsStorage()
    forwarder = MetricsForwarder(storage, MetricsSettings(batch_max_samples=4, max_in_flight=2))
    samples = typical_node_samples(10)
    for s in samples:
        forwarder.add(s)
    first, second = forwarder.seal(), forwarder.seal()
    assert first is not None and second is not None
    assert forwarder.seal() is None  # two in flight
    assert (first.batch_seq, second.batch_seq) == (1, 2)
    assert decode_batch(first.body).samples == tuple(samples[:4])
    assert decode_batch(second.body).samples == tuple(samples[4:8])
    assert decode_batch(first.body).stream_id == forwarder.stream_id
    assert forwarder.backlog() == 2
    forwarder.acked(2)  # cumulative: batch 1 too
    assert forwarder.unacked() == []
    third = forwarder.seal()
    assert third is not None and third.samples == 2 and third.batch_seq == 3
    assert forwarder.seal() is None  # nothing left


def test_stream_identity_survives_a_restart_of_the_agent() -> None:
    storage = MemoryMetricsStorage()
    before = MetricsForwarder(storage, MetricsSettings())
    for s in typical_node_samples(3):
        before.add(s)
    sealed = before.seal()
    assert sealed is not None
    after = MetricsForwarder(storage, MetricsSettings())  # same store, new process
    assert after.stream_id == before.stream_id
    assert after.unacked() == [sealed]  # resent with the same bytes
    after.add(typical_node_samples(1, t0_ms=1_800_000_000_000)[0])
    nxt = after.seal()
    assert nxt is not None and nxt.batch_seq == sealed.batch_seq + 1


def test_a_corrupt_stored_sample_is_discarded_not_wedging_delivery() -> None:
    storage = MemoryMetricsStorage()
    forwarder = MetricsForwarder(storage, MetricsSettings())
    good = typical_node_samples(2)
    forwarder.add(good[0])
    storage.append_sample(b"\x01garbage")
    forwarder.add(good[1])
    batch = forwarder.seal()
    assert batch is not None
    assert decode_batch(batch.body).samples == tuple(good)
    assert forwarder.stats.corrupt_samples == 1
    assert forwarder.backlog() == 0


def test_only_corrupt_samples_seal_nothing_and_are_removed() -> None:
    storage = MemoryMetricsStorage()
    forwarder = MetricsForwarder(storage, MetricsSettings())
    storage.append_sample(b"")
    assert forwarder.seal() is None
    assert forwarder.backlog() == 0


def test_size_accounting_counts_payload_and_rows() -> None:
    storage = MemoryMetricsStorage()
    forwarder = MetricsForwarder(storage, MetricsSettings())
    samples = typical_node_samples(4)
    for s in samples:
        forwarder.add(s)
    assert storage.size_bytes() == sum(len(encode_sample(s)) + ROW_OVERHEAD_BYTES for s in samples)
    batch = forwarder.seal()
    assert batch is not None
    assert storage.size_bytes() == len(batch.body) + ROW_OVERHEAD_BYTES
    forwarder.acked(batch.batch_seq)
    assert storage.size_bytes() == 0
    storage.replace_samples([], [StoredSample(7, b"x")])
    assert storage.size_bytes() == 1 + ROW_OVERHEAD_BYTES
    storage.replace_samples([], [StoredSample(7, b"xyz")])  # replaced, not added
    assert storage.size_bytes() == 3 + ROW_OVERHEAD_BYTES


def test_budget_of_only_sealed_batches_does_not_loop() -> None:
    storage = MemoryMetricsStorage()
    settings = MetricsSettings(budget_bytes=16 * 1024, batch_max_samples=200, max_in_flight=1)
    forwarder = MetricsForwarder(storage, settings)
    for s in typical_node_samples(100):
        forwarder.add(s)
    assert forwarder.seal() is not None
    forwarder.add(typical_node_samples(1, t0_ms=1_800_000_000_000)[0])
    assert forwarder.backlog() == 1


def test_when_nothing_can_merge_the_oldest_are_dropped() -> None:
    storage = MemoryMetricsStorage()
    settings = MetricsSettings(budget_bytes=16 * 1024, max_window_s=15.0)  # no merge fits
    forwarder = MetricsForwarder(storage, settings)
    samples = typical_node_samples(200)
    for s in samples:
        forwarder.add(s)
        assert storage.size_bytes() <= settings.budget_bytes
    assert forwarder.stats.merged_samples == 0
    assert forwarder.stats.dropped_samples > 0
    kept = [s.data for s in storage.samples()]
    assert kept == [encode_sample(s) for s in samples[-len(kept) :]]  # the newest are kept
