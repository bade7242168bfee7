"""``HubStreams`` between the agent store and a real protocol session (client and server
sans-I/O, bytes pumped in memory), the hub side using the hub's own twin and metrics logic:
twin reports and metrics batches leave, are acknowledged, survive a dropped session, and
their seqs stay below ``Store.next_seq()``."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from cloudhub.devices import merge_reported
from cloudhub.metrics import EdgeMetricsStore
from edgeagent.devices import EdgeTwins, Reading
from edgeagent.metrics import MetricsForwarder, MetricsService, MetricsSettings, Sampler
from edgeagent.store import Store
from edgeagent.streams import HubStreams
from protocol.devices import ReportedValue, parse_device, parse_device_model
from protocol.messages import MetricsBatch, ObjectRef, TwinDesired, TwinReported, Welcome
from protocol.session import Acked, HelloReceived, MessageReceived, Role, Session
from tests.bench.bench_metrics import typical_node_samples
from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device
from tests.edgeagent.test_outbox_session import pump

NOW = 1_700_000_000.0


class Hub:
    """The hub end of one session: takes what arrives, acks it (the session does)."""

    def __init__(self) -> None:
        self.reports: list[tuple[int, TwinReported]] = []
        self.batches: list[tuple[int, MetricsBatch]] = []
        self.metrics = EdgeMetricsStore()

    def take(self, server: Session) -> None:
        for event in server.events_received():
            if isinstance(event, MessageReceived):
                if isinstance(event.message, TwinReported):
                    self.reports.append((event.seq, event.message))
                elif isinstance(event.message, MetricsBatch):
                    self.batches.append((event.seq, event.message))
                    self.metrics.ingest("edge-1", event.message.samples, NOW)


class Edge:
    """The uplink's loop, as the streams' docstring describes it, over sessions."""

    def __init__(self, store: Store, streams: HubStreams) -> None:
        self.store, self.streams = store, streams
        self.client: Session | None = None
        self.server: Session | None = None
        self.hub = Hub()
        self.now = 1000.0

    def connect(self, received_up_to: int = 0) -> None:
        from edgeagent.outbox import hello

        client = Session(Role.CLIENT, now=self.now, next_seq=self.store.next_seq())
        server = Session(Role.SERVER, now=self.now)
        client.connect(hello(self.store, node_name="edge-1", agent_version="t"), self.now)
        pump(client, server, self.now)
        [event] = [e for e in server.events_received() if isinstance(e, HelloReceived)]
        welcome = Welcome(event.version, NOW, "s", received_up_to, 20.0)
        server.accept(welcome, self.now)
        pump(client, server, self.now)
        client.events_received()
        self.client, self.server = client, server
        self.streams.session_started(received_up_to)

    def send(self) -> int:
        assert self.client is not None
        items = self.streams.messages_to_send(self.client.window_free)
        for item in items:
            self.streams.sent(item, self.client.send(item.message, self.now))
        return len(items)

    def deliver(self, *, ack: bool = True) -> None:
        """Bytes to the hub; with ``ack`` the hub's acks come back."""
        assert self.client is not None and self.server is not None
        self.server.receive_data(self.client.data_to_send(), self.now)
        self.hub.take(self.server)
        if not ack:
            return
        self.now += 1.0
        self.server.handle_timer(self.now)  # the delayed ack is due
        self.client.receive_data(self.server.data_to_send(), self.now)
        for event in self.client.events_received():
            if isinstance(event, Acked):
                self.streams.acked(event.up_to)

    def drop(self) -> None:
        self.client = self.server = None
        self.streams.session_ended()


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
    streams = HubStreams(store, "edge-1", twins=twins)
    woken: list[int] = []
    streams.add_wakeup(lambda: woken.append(1))
    edge = Edge(store, streams)
    twins.report("default", "thermo-1", [Reading("temperature", 18.0)], now=NOW)
    assert streams.messages_to_send(10) == []  # offline: nothing to send
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
    streams = HubStreams(store, "edge-1", twins=twins)
    ref = ObjectRef("Device", "default", "thermo-1", "u-1")
    assert streams.receive(TwinDesired(ref=ref, version=3, properties={"setpoint": 22.5}), NOW)
    assert twins.desired("default", "thermo-1").properties == {"setpoint": 22.5}
    assert streams.receive(TwinDesired(ref=ref, version=2, properties={"setpoint": 5.0}), NOW)
    assert twins.desired("default", "thermo-1").version == 3  # older: discarded
    assert not streams.receive(MetricsBatch(node_name="x", samples={}), NOW)


async def test_metrics_batches_through_the_streams(store: Store, tmp_path: pathlib.Path) -> None:
    settings = MetricsSettings(
        sample_interval_s=60, batch_interval_s=60, state_dir=str(tmp_path), batch_max_samples=4
    )
    forwarder = MetricsForwarder(store.metrics(), settings)
    streams = HubStreams(store, "edge-1")
    service = MetricsService(settings, Sampler(settings), forwarder, streams)
    streams.attach_metrics(service)
    for sample in typical_node_samples(10):
        forwarder.add(sample)
    edge = Edge(store, streams)
    assert await service.flush() == 0  # offline
    edge.connect()
    assert await service.flush() == 3  # 4 + 4 + 2 samples, sealed and queued
    assert edge.send() == 3
    edge.deliver(ack=False)
    edge.drop()  # acks lost with the session
    edge.connect()
    assert await service.flush() == 3  # the same three batches again, same bytes
    assert edge.send() == 3
    edge.deliver()
    assert forwarder.unacked() == [] and forwarder.backlog() == 0
    assert edge.hub.metrics.stats.accepted == 3 and edge.hub.metrics.stats.duplicate == 3
    assert store.next_seq() > max(seq for seq, _ in edge.hub.batches)
    bodies = [m.samples for _, m in edge.hub.batches]
    assert bodies[:3] == bodies[3:]


async def test_flush_soon_after_a_reconnect(store: Store, tmp_path: pathlib.Path) -> None:
    settings = MetricsSettings(
        sample_interval_s=3600, batch_interval_s=3600, state_dir=str(tmp_path)
    )
    forwarder = MetricsForwarder(store.metrics(), settings)
    streams = HubStreams(store, "edge-1")
    woken = asyncio.Event()
    streams.add_wakeup(woken.set)
    service = MetricsService(settings, Sampler(settings), forwarder, streams)
    streams.attach_metrics(service)
    task = asyncio.create_task(service.run())  # samples once at start, then waits an hour
    try:
        edge = Edge(store, streams)
        await asyncio.wait_for(_until(lambda: forwarder.backlog() >= 1), 10)
        woken.clear()
        edge.connect()  # flush_soon: the backlog leaves without waiting for the interval
        await asyncio.wait_for(woken.wait(), 10)
        await asyncio.wait_for(_until(lambda: streams.messages_to_send(10) != []), 10)
        assert edge.send() == 1
        edge.deliver()
        assert edge.hub.metrics.stats.accepted == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _until(predicate) -> None:
    while not predicate():  # noqa: ASYNC110  (a condition owned by another task)
        await asyncio.sleep(0.01)
