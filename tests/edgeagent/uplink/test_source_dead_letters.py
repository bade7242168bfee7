"""Issue 15 gap: a twin report or a metrics batch over the message limit the session agreed
with the hub (``MessageTooLarge`` at ``send()``) went nowhere and was offered again first
at every drain, ahead of what was behind it. Now the source dead-letters it in the store
(``edgeagent.store.deadletters``, with a Warning ``MessageTooLarge`` Event) and what is
behind it goes; nothing still unacknowledged is dropped on the way.

A real SQLite store, the real twins and metrics forwarder, and the real protocol session
(client and server sans-I/O, bytes pumped in memory, the hub's message limit lowered),
drained as ``HubLink._drain_once`` does."""

from __future__ import annotations

import base64
import pathlib

import pytest

from edgeagent.devices import EdgeTwins, Reading
from edgeagent.metrics import MetricsForwarder, MetricsSettings
from edgeagent.metrics.memory import MemoryMetricsStorage
from edgeagent.store import Store
from edgeagent.uplink.sources.metrics import MetricsSource
from edgeagent.uplink.sources.twins import TwinSource
from protocol.codec import encode
from protocol.messages import MetricsBatch, TwinReported
from tests.bench.bench_metrics import typical_node_samples
from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device
from tests.edgeagent.uplink import harness

NOW = 1_700_000_000.0
KIB = 1024
NODE = "edge-1"
LIMIT = 8 * KIB  # the hub's message limit in the twin tests
BIG = 12 * KIB  # a label over it (text values may be up to 16 KiB)


@pytest.fixture
def store(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    yield s
    s.close()


def _twins(store: Store) -> EdgeTwins:
    twins = EdgeTwins(store.twins())
    twins.upsert_model(THERMOSTAT_MODEL)
    props = [{"name": "setpoint"}, {"name": "temperature"}, {"name": "label"}]
    twins.upsert_device(device(properties=props))
    return twins


def _warnings(store: Store) -> list[dict]:
    return [
        e.body
        for e in store.outbox_unsent(limit=100)
        if e.kind == "event" and e.body["reason"] == "MessageTooLarge"
    ]


def test_a_twin_report_over_the_limit_is_dead_lettered_and_the_others_go(store: Store) -> None:
    twins = _twins(store)
    source = TwinSource(twins, dead_letters=store, node_name=NODE)
    edge = harness.Edge(store, source, limit=LIMIT, node=NODE)
    edge.connect()
    twins.report(
        "default",
        "thermo-1",
        [Reading("label", "x" * BIG), Reading("temperature", 19.5)],
        now=NOW,
    )
    assert edge.send() == 1  # the temperature; the label is over the hub's 8 KiB
    edge.deliver()
    assert [(m.property, m.value) for m in edge.received] == [("temperature", 19.5)]
    assert twins.pending_reports() == []  # nothing left to block what comes next
    (dead,) = store.dead_letters()
    assert dead.id < 0 and dead.kind == "twin_reported" and dead.attempts == 1
    assert dead.body["property"] == "label" and len(dead.body["value"]) == BIG
    assert dead.body["ref"]["uid"] == "u-1" and dead.size > BIG
    assert f"{LIMIT}" in dead.reason
    (warning,) = _warnings(store)
    assert warning["ref"]["kind"] == "Device" and warning["ref"]["uid"] == "u-1"
    assert "twin_reported label" in warning["message"] and "dead letters" in warning["message"]
    # A later session offers nothing again; a newer label that fits goes as usual.
    edge.drop()
    edge.connect()
    assert edge.send() == 0
    twins.report("default", "thermo-1", [Reading("label", "short")], now=NOW + 1)
    assert edge.send() == 1
    edge.deliver()
    assert (edge.received[-1].property, edge.received[-1].value) == ("label", "short")
    assert store.dead_letter_count() == 1


def test_a_history_entry_over_the_limit_never_drops_older_unacked_ones(store: Store) -> None:
    """History of one property: v1 small, v2 too large, v3 small. v2 is dead-lettered while
    v1 is still unacknowledged; the session drops; v1 and v3 go again (v2 does not), and
    only then is v2 dropped from the history."""
    twins = _twins(store)
    source = TwinSource(twins, dead_letters=store, node_name=NODE)
    edge = harness.Edge(store, source, limit=LIMIT, node=NODE)
    edge.connect()
    for i, value in enumerate(["a", "x" * BIG, "b"]):
        twins.report("default", "thermo-1", [Reading("label", value)], now=NOW + i, history=True)
    assert edge.send() == 3  # the latest report ("b"), history v1 and v3
    edge.deliver(ack=False)
    edge.drop()
    assert len(twins.pending_history()) == 3  # v2 too: v1 before it is not acknowledged
    edge.connect()
    assert edge.send() == 3  # the same three again, not v2
    edge.deliver()
    assert twins.pending_history() == [] and twins.pending_reports() == []
    history = [m.value for m in edge.received if isinstance(m, TwinReported)]
    assert "x" * BIG not in history and history.count("a") == 2
    (dead,) = store.dead_letters()
    assert dead.body["value"] == "x" * BIG


def test_without_a_store_a_report_over_the_limit_is_only_skipped_for_the_session(
    store: Store,
) -> None:
    twins = _twins(store)
    source = TwinSource(twins)  # no dead-letter table: kept, tried again next session
    edge = harness.Edge(store, source, limit=LIMIT, node=NODE)
    edge.connect()
    twins.report(
        "default",
        "thermo-1",
        [Reading("label", "x" * BIG), Reading("temperature", 1.0)],
        now=NOW,
    )
    assert edge.send() == 1 and edge.send() == 0
    edge.deliver()
    assert [r.property for r in twins.pending_reports()] == ["label"]
    assert store.dead_letter_count() == 0


def _sizes(tmp_path: pathlib.Path, samples: list) -> tuple[int, int]:
    """Encoded sizes (bytes) of a batch of 2 and of 4 of ``samples``."""
    settings = MetricsSettings(
        sample_interval_s=60, batch_interval_s=60, state_dir=str(tmp_path), batch_max_samples=4
    )
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    sizes = []
    for part in (samples[:2], samples[2:6]):
        for sample in part:
            forwarder.add(sample)
        batch = forwarder.seal()
        assert batch is not None
        sizes.append(len(encode(batch.message(NODE), 1)) - 4)
    return sizes[0], sizes[1]


def _metrics_edge(
    store: Store, tmp_path: pathlib.Path, samples: list
) -> tuple[MetricsForwarder, MetricsSource, harness.Edge]:
    """Batches of at most 4 samples over a session whose limit lies between the sizes of a
    2-sample and a 4-sample batch of ``samples``."""
    small, large = _sizes(tmp_path / "sizes", samples)
    settings = MetricsSettings(
        sample_interval_s=60, batch_interval_s=60, state_dir=str(tmp_path), batch_max_samples=4
    )
    forwarder = MetricsForwarder(store.metrics(), settings)
    source = MetricsSource(NODE, dead_letters=store)
    source.attach(forwarder)
    edge = harness.Edge(store, source, limit=(small + large) // 2, node=NODE)
    edge.connect()
    return forwarder, source, edge


def test_a_metrics_batch_over_the_limit_is_dead_lettered_behind_unacked_ones(
    store: Store, tmp_path: pathlib.Path
) -> None:
    """Batch 1 (2 samples) fits and is in flight; batch 2 (4 samples) is over the limit:
    dead-lettered, kept in the forwarder until batch 1 is acknowledged (an ack covers the
    earlier batches), then dropped, and the batches after it go."""
    samples = typical_node_samples(12)
    forwarder, source, edge = _metrics_edge(store, tmp_path, samples)
    for sample in samples[:2]:
        forwarder.add(sample)
    assert edge.send() == 1  # batch 1
    for sample in samples[2:6]:
        forwarder.add(sample)
    source.batch_due()
    assert edge.send() == 0  # batch 2: too large
    assert [b.batch_seq for b in forwarder.unacked()] == [1, 2]  # 1 is not acked yet
    samples_2 = forwarder.unacked()[1].message(NODE).samples
    edge.deliver(ack=False)
    edge.drop()
    edge.connect()
    assert edge.send() == 1  # batch 1 again, not batch 2
    edge.deliver()
    assert forwarder.unacked() == []  # 1 acknowledged, then 2 dropped: dead-lettered
    (dead,) = store.dead_letters()
    assert dead.kind == "metrics_batch" and dead.body["batch_seq"] == 2
    assert edge.limit is not None and dead.size > edge.limit
    kept = {  # the batch's packed bytes, whole
        column: [base64.b64decode(v["base64"]) if isinstance(v, dict) else v for v in values]
        for column, values in dead.body["samples"].items()
    }
    assert kept == samples_2
    (warning,) = _warnings(store)
    assert warning["ref"] == {"kind": "Node", "namespace": "", "name": NODE, "uid": NODE}
    # What follows is not held up: two samples at a time fit.
    for sample in samples[6:8]:
        forwarder.add(sample)
    source.batch_due()
    assert edge.send() == 1
    edge.deliver()
    batches = [m for m in edge.received if isinstance(m, MetricsBatch)]
    assert len(batches) == 3 and forwarder.unacked() == [] and forwarder.backlog() == 0


def test_a_metrics_batch_over_the_limit_at_the_head_is_dropped_at_once(
    store: Store, tmp_path: pathlib.Path
) -> None:
    samples = typical_node_samples(8)
    forwarder, _source, edge = _metrics_edge(store, tmp_path, samples)
    for sample in samples[:6]:
        forwarder.add(sample)
    assert edge.send() == 1  # batch 1 (4 samples) dead at once, then batch 2 (2) goes
    assert [b.batch_seq for b in forwarder.unacked()] == [2]
    edge.deliver()
    assert forwarder.unacked() == [] and store.dead_letter_count() == 1
