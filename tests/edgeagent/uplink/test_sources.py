"""The twin and metrics sources between the agent store and a real protocol session
(client and server sans-I/O, bytes pumped in memory, drained through the send scheduler as
the hub session does), the hub side using the hub's own twin and metrics logic: twin
reports and metrics batches leave, are acknowledged, survive a dropped session, and their
seqs stay below ``Store.next_seq()``."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from cloudhub.devices import merge_reported
from cloudhub.metrics import EdgeMetricsStore
from edgeagent.devices import EdgeTwins, Reading
from edgeagent.metrics import MetricsForwarder, MetricsService, MetricsSettings, Sampler
from edgeagent.store import Store
from edgeagent.uplink.sources.base import UpSource
from edgeagent.uplink.sources.metrics import MetricsSource
from edgeagent.uplink.sources.outbox import OutboxSource
from edgeagent.uplink.sources.twins import TwinSource
from protocol.devices import ReportedValue, parse_device, parse_device_model
from protocol.messages import (
    MetricsBatch,
    ObjectRef,
    PodStatus,
    TwinDesired,
    TwinReported,
)
from protocol.session import MessageReceived, Session
from tests.bench.bench_metrics import typical_node_samples
from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device
from tests.edgeagent.uplink import harness

NOW = 1_700_000_000.0


class Hub:
    """The hub end of one session: takes what arrives, acks it (the session does)."""

    def __init__(self) -> None:
        self.reports: list[tuple[int, TwinReported]] = []
        self.batches: list[tuple[int, MetricsBatch]] = []
        self.metrics = EdgeMetricsStore()
        self.order: list[str] = []

    def take(self, server: Session) -> None:
        for event in server.events_received():
            if isinstance(event, MessageReceived):
                if isinstance(event.message, TwinReported):
                    self.reports.append((event.seq, event.message))
                    self.order.append("twin")
                elif isinstance(event.message, PodStatus):
                    self.order.append("status")
                elif isinstance(event.message, MetricsBatch):
                    self.order.append("metrics")
                    self.batches.append((event.seq, event.message))
                    self.metrics.ingest("edge-1", event.message.samples, NOW)


class Edge(harness.Edge):
    """The shared session harness with this file's :class:`Hub` taking the arrivals."""

    def __init__(self, store: Store, *sources: UpSource) -> None:
        self.hub = Hub()
        super().__init__(store, *sources, take=self.hub.take)


@pytest.fixture
def store(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    yield s
    s.close()


def _twins(store: Store) -> EdgeTwins:
    twins = EdgeTwins(store.twins())
    twins.upsert_model(THERMOSTAT_MODEL)
    twins.upsert_device(device())
    return twins


def test_twin_reports_leave_are_acked_and_survive_a_dropped_session(store: Store) -> None:
    twins = _twins(store)
    source = TwinSource(twins)
    woken: list[int] = []
    source.add_wakeup(lambda: woken.append(1))
    edge = Edge(store, source)
    twins.report("default", "thermo-1", [Reading("temperature", 18.0)], now=NOW)
    assert source.messages_to_send(10) == []  # offline: nothing to send
    edge.connect()
    assert woken  # a new session wakes the sender
    first = twins.report(
        "default",
        "thermo-1",
        [Reading("temperature", 19.5), Reading("setpoint", 21)],
        now=NOW + 1,
        history=True,
    )
    assert edge.send() == 4  # the two latest, then their history entries
    assert edge.send() == 0  # in flight: not offered twice
    edge.deliver()
    values = {(m.property, m.value) for _, m in edge.hub.reports}
    assert values == {("temperature", 19.5), ("setpoint", 21.0)}
    assert {m.ref.uid for _, m in edge.hub.reports} == {"u-1"}
    assert twins.pending_reports() == twins.pending_history() == []  # acked: delivered
    assert store.next_seq() > max(seq for seq, _ in edge.hub.reports)
    # the hub's own merge accepts them, latest wins
    reports = [
        ReportedValue(
            m.ref.namespace, m.ref.name, m.ref.uid, m.property, m.value, m.version, m.timestamp
        )
        for _, m in edge.hub.reports
    ]
    merged = merge_reported(parse_device(device()), parse_device_model(THERMOSTAT_MODEL), reports)
    assert {r.property for r in merged.applied} == {"temperature", "setpoint"}
    # sent, then the session dies before the ack: sent again on the next session
    newer = twins.report("default", "thermo-1", [Reading("temperature", 20.0)], now=NOW + 2)
    assert edge.send() == 1
    edge.deliver(ack=False)
    edge.drop()
    edge.connect()
    assert edge.send() == 1
    edge.deliver()
    assert [m.version for _, m in edge.hub.reports[-2:]] == [newer[0].version] * 2  # hub dedups
    assert twins.pending_reports() == []
    # a session the hub says processed everything: nothing is resent
    twins.report("default", "thermo-1", [Reading("temperature", 20.5)], now=NOW + 3)
    edge.send()
    edge.deliver(ack=False)
    highest = edge.hub.reports[-1][0]
    edge.drop()
    edge.connect(received_up_to=highest)
    assert edge.send() == 0 and twins.pending_reports() == []
    assert first[0].version < newer[0].version


def test_twin_desired_reaches_the_twins(store: Store) -> None:
    twins = _twins(store)
    source = TwinSource(twins, wall_clock=lambda: NOW)
    ref = ObjectRef("Device", "default", "thermo-1", "u-1")
    source.on_desired(TwinDesired(ref=ref, version=3, properties={"setpoint": 22.5}))
    assert twins.desired("default", "thermo-1").properties == {"setpoint": 22.5}
    source.on_desired(TwinDesired(ref=ref, version=2, properties={"setpoint": 5.0}))
    assert twins.desired("default", "thermo-1").version == 3  # older: discarded
    with pytest.raises(TypeError):
        source.on_desired(MetricsBatch(node_name="x", samples={}))


def test_without_devices_twin_desired_is_ignored_and_nothing_goes_up(store: Store) -> None:
    source = TwinSource(None)
    ref = ObjectRef("Device", "default", "thermo-1", "u-1")
    source.on_desired(TwinDesired(ref=ref, version=3, properties={"setpoint": 22.5}))
    source.session_started(0)
    assert source.messages_to_send(10) == []


def test_a_report_sent_without_a_seq_is_refused(store: Store) -> None:
    twins = _twins(store)
    source, metrics = TwinSource(twins), MetricsSource("edge-1")
    source.session_started(0)
    twins.report("default", "thermo-1", [Reading("temperature", 18.0)], now=NOW)
    [item] = source.messages_to_send(10)
    with pytest.raises(ValueError, match="needs an ack"):
        source.sent(item, None)
    with pytest.raises(ValueError, match="needs an ack"):
        metrics.sent(item, None)


def _metrics(store: Store, tmp_path: pathlib.Path, **kw) -> tuple[MetricsForwarder, MetricsSource]:
    settings = MetricsSettings(
        sample_interval_s=60, batch_interval_s=60, state_dir=str(tmp_path), **kw
    )
    forwarder = MetricsForwarder(store.metrics(), settings)
    source = MetricsSource("edge-1")
    source.attach(forwarder)
    return forwarder, source


def test_metrics_batches_through_the_source(store: Store, tmp_path: pathlib.Path) -> None:
    forwarder, source = _metrics(store, tmp_path, batch_max_samples=4)
    for sample in typical_node_samples(10):
        forwarder.add(sample)
    edge = Edge(store, source)
    assert source.messages_to_send(10) == []  # offline
    edge.connect()
    assert edge.send() == 3  # 4 + 4 + 2 samples, sealed and sent
    assert edge.send() == 0  # in flight: not offered twice
    edge.deliver(ack=False)
    edge.drop()  # acks lost with the session
    edge.connect()
    assert edge.send() == 3  # the same three batches again, same bytes
    edge.deliver()
    assert forwarder.unacked() == [] and forwarder.backlog() == 0
    assert edge.hub.metrics.stats.accepted == 3 and edge.hub.metrics.stats.duplicate == 3
    assert store.next_seq() > max(seq for seq, _ in edge.hub.batches)
    bodies = [m.samples for _, m in edge.hub.batches]
    assert bodies[:3] == bodies[3:]


def test_metrics_seal_only_when_due_and_within_max_in_flight(
    store: Store, tmp_path: pathlib.Path
) -> None:
    forwarder, source = _metrics(store, tmp_path, batch_max_samples=2, max_in_flight=2)
    for sample in typical_node_samples(10):
        forwarder.add(sample)
    edge = Edge(store, source)
    edge.connect()  # a new session: due at once
    assert edge.send() == 2  # max_in_flight sealed; the rest stays down-samplable
    assert forwarder.backlog() == 6
    edge.deliver()  # the ack leaves a backlog: due again
    assert edge.send() == 2 and forwarder.backlog() == 2
    edge.deliver()
    assert edge.send() == 1 and forwarder.backlog() == 0
    edge.deliver()
    assert edge.send() == 0  # nothing buffered: no empty batch, and no longer due
    forwarder.add(typical_node_samples(11)[-1])
    assert edge.send() == 0  # a wake-up alone (another stream's) seals nothing
    source.batch_due()  # the metrics service: a batch interval's worth
    assert edge.send() == 1
    edge.deliver()
    assert forwarder.backlog() == 0 and forwarder.unacked() == []


def test_metrics_with_the_forwarder_detached(store: Store, tmp_path: pathlib.Path) -> None:
    forwarder, source = _metrics(store, tmp_path)
    for sample in typical_node_samples(2):
        forwarder.add(sample)
    source.session_started(0)
    source.attach(None)  # the metrics service stopped
    assert source.messages_to_send(10) == []
    source.acked(10)  # nothing in flight: no error
    source.attach(forwarder)
    assert len(source.messages_to_send(10)) == 1


async def test_the_service_says_when_a_batch_is_due(store: Store, tmp_path: pathlib.Path) -> None:
    settings = MetricsSettings(
        sample_interval_s=3600, batch_interval_s=3600, state_dir=str(tmp_path)
    )
    forwarder = MetricsForwarder(store.metrics(), settings)
    source = MetricsSource("edge-1")
    source.attach(forwarder)
    woken = asyncio.Event()
    source.add_wakeup(woken.set)
    edge = Edge(store, source)
    edge.connect()
    edge.send()  # nothing buffered yet: the session's due is spent
    woken.clear()
    service = MetricsService(settings, Sampler(settings), forwarder, on_batch_due=source.batch_due)
    task = asyncio.create_task(service.run())  # samples once at start, then waits an hour
    try:
        await asyncio.wait_for(woken.wait(), 10)  # one sample is a batch's worth here
        assert edge.send() == 1
        edge.deliver()
        assert edge.hub.metrics.stats.accepted == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_status_and_twin_reports_go_before_a_metrics_backlog(
    store: Store, tmp_path: pathlib.Path
) -> None:
    """The scheduler's priorities over real sources: a pod status and a twin report made
    while metrics batches wait leave first, whatever order the sources were added in."""
    forwarder, metrics = _metrics(store, tmp_path, batch_max_samples=1, max_in_flight=64)
    for sample in typical_node_samples(20):
        forwarder.add(sample)
    twins = _twins(store)
    edge = Edge(store, metrics, TwinSource(twins), OutboxSource(store))
    edge.connect()
    ref = ObjectRef("Pod", "default", "p", "u-p")
    store.record_pod_status(ref, {"phase": "Running"}, NOW)
    twins.report("default", "thermo-1", [Reading("temperature", 18.0)], now=NOW)
    assert edge.send() == 22
    edge.deliver()
    assert edge.hub.order[:2] == ["twin", "status"]  # one class: in the order added
    assert edge.hub.order[2:] == ["metrics"] * 20
