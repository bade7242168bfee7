"""The SQLite ``MetricsStorage`` behaves as the reference ``MemoryMetricsStorage`` under the
real forwarder (budget, down-sampling, sealing, acks), and survives a reopen."""

from __future__ import annotations

import pathlib
import random

import pytest

from edgeagent.errors import AgentError, UsageError
from edgeagent.metrics import (
    ROW_OVERHEAD_BYTES,
    MemoryMetricsStorage,
    MetricsForwarder,
    MetricsSettings,
    StoredSample,
    StreamState,
)
from edgeagent.store import Store
from protocol.metrics_codec import decode_batch, encode_sample
from tests.bench.bench_metrics import typical_node_samples


@pytest.fixture
def store(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    yield s
    s.close()


def _data(storage) -> list[bytes]:
    return [s.data for s in storage.samples()]


def test_forwarder_over_both_storages_seals_the_same_batches(store: Store) -> None:
    """Offline stretches that force down-sampling, online stretches that seal and ack."""
    settings = MetricsSettings(budget_bytes=24 * 1024, batch_max_samples=30, max_in_flight=3)
    memory, sql = MemoryMetricsStorage(), store.metrics()
    for storage in (memory, sql):
        storage.create_stream(StreamState(0xABCDEF, 1))
    fwd_memory, fwd_sql = MetricsForwarder(memory, settings), MetricsForwarder(sql, settings)
    rnd = random.Random(3)
    sealed = 0
    for i, sample in enumerate(typical_node_samples(900)):
        fwd_memory.add(sample)
        fwd_sql.add(sample)
        assert _data(sql) == _data(memory), i
        assert sql.size_bytes() == memory.size_bytes(), i
        assert sql.size_bytes() <= settings.budget_bytes
        if (i // 150) % 2 == 1 and rnd.random() < 0.3:  # online
            a, b = fwd_memory.seal(), fwd_sql.seal()
            assert a == b, i
            sealed += a is not None
            if rnd.random() < 0.5 and fwd_memory.unacked():
                up_to = rnd.choice(fwd_memory.unacked()).batch_seq
                fwd_memory.acked(up_to)
                fwd_sql.acked(up_to)
        assert sql.batches() == memory.batches(), i
        assert sql.stream() == memory.stream(), i
    assert sealed > 5
    assert fwd_sql.stats == fwd_memory.stats and fwd_sql.stats.merged_samples > 0


def test_size_accounting_and_replacement(store: Store) -> None:
    sql = store.metrics()
    forwarder = MetricsForwarder(sql, MetricsSettings())
    samples = typical_node_samples(4)
    for s in samples:
        forwarder.add(s)
    assert sql.size_bytes() == sum(len(encode_sample(s)) + ROW_OVERHEAD_BYTES for s in samples)
    batch = forwarder.seal()
    assert batch is not None and decode_batch(batch.body).samples == tuple(samples)
    assert sql.size_bytes() == len(batch.body) + ROW_OVERHEAD_BYTES
    backlog = sql.backlog()
    assert (backlog.samples, backlog.batches, backlog.oldest_t_ms) == (0, 1, samples[0].t_ms)
    forwarder.acked(batch.batch_seq)
    assert sql.size_bytes() == 0
    sql.replace_samples([], [StoredSample(7, b"x")])
    sql.replace_samples([], [StoredSample(7, b"xyz")])  # replaced, not added
    assert sql.size_bytes() == 3 + ROW_OVERHEAD_BYTES


def test_stream_and_sealed_batches_survive_a_restart(tmp_path: pathlib.Path) -> None:
    settings = MetricsSettings(batch_max_samples=3)
    samples = typical_node_samples(5)
    with Store.open(tmp_path / "store.db") as s:
        before = MetricsForwarder(s.metrics(), settings)
        for sample in samples:
            before.add(sample)
        first = before.seal()
        assert first is not None
        stream_id = before.stream_id
    with Store.open(tmp_path / "store.db") as s:
        after = MetricsForwarder(s.metrics(), settings)
        assert after.stream_id == stream_id
        assert after.unacked() == [first]  # resent with the same bytes
        second = after.seal()
        # numbering resumes at the reservation: above every batch seq used before
        assert second is not None and second.batch_seq > first.batch_seq
        assert decode_batch(second.body).samples == tuple(samples[3:])
        backlog = s.metrics().backlog()
        assert (backlog.samples, backlog.batches) == (0, 2)
        third_seq = second.batch_seq + 1
        for sample in typical_node_samples(2, t0_ms=1_800_000_000_000):
            after.add(sample)
        third = after.seal()
        assert third is not None and third.batch_seq == third_seq  # then one by one again


@pytest.mark.parametrize("which", ["sqlite", "memory"])
def test_seal_before_the_stream_exists_is_refused(store: Store, which: str) -> None:
    """A misuse (UsageError, under AgentError) in both storages alike: the store, below
    the metrics package, raises none of its errors."""
    from edgeagent.metrics import SealedBatch

    storage = store.metrics() if which == "sqlite" else MemoryMetricsStorage()
    with pytest.raises(UsageError, match="create_stream") as exc:
        storage.seal_batch(SealedBatch(1, b"x", 1, 0, 0), [])
    assert isinstance(exc.value, AgentError)
    assert storage.batches() == []
