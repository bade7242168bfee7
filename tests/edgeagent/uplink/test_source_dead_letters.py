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
from edgeagent.uplink.scheduler import SendScheduler
from edgeagent.uplink.sources.base import UpSource
from edgeagent.uplink.sources.metrics import MetricsSource
from edgeagent.uplink.sources.outbox import hello
from edgeagent.uplink.sources.twins import TwinSource
from protocol.codec import encode
from protocol.config import SessionConfig
from protocol.errors import MessageTooLarge
from protocol.messages import MetricsBatch, TwinReported, Welcome
from protocol.session import Acked, HelloReceived, MessageReceived, Role, Session
from tests.bench.bench_metrics import typical_node_samples
from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device
from tests.edgeagent.uplink.test_outbox import pump

NOW = 1_700_000_000.0
KIB = 1024
NODE = "edge-1"
LIMIT = 8 * KIB  # the hub's message limit in the twin tests
BIG = 12 * KIB  # a label over it (text values may be up to 16 KiB)


class Edge:
    """One agent's up-going streams over sessions to a hub with ``limit`` bytes per
    message: the drain loop of ``HubLink`` (``MessageTooLarge`` goes to the source)."""

    def __init__(self, store: Store, source: UpSource, limit: int) -> None:
        self.store, self.source, self.limit = store, source, limit
        self.scheduler: SendScheduler[UpSource] = SendScheduler()
        self.scheduler.add(source)
        self.client: Session | None = None
        self.server: Session | None = None
        self.received: list[object] = []
        self.now = 1000.0

    def connect(self) -> None:
        client = Session(Role.CLIENT, now=self.now, next_seq=self.store.next_seq())
        server = Session(Role.SERVER, SessionConfig(max_message_size=self.limit), now=self.now)
        client.connect(hello(self.store, node_name=NODE, agent_version="t"), self.now)
        pump(client, server, self.now)
        [event] = [e for e in server.events_received() if isinstance(e, HelloReceived)]
        server.accept(Welcome(event.version, NOW, "s", 0, 20.0), self.now)
        pump(client, server, self.now)
        client.events_received()
        assert client.limits.max_message_size == self.limit
        self.client, self.server = client, server
        self.source.session_started(0)

    def drain(self) -> int:
        """Send what the source offers while the window has room; returns how many."""
        client = self.client
        assert client is not None
        sent = 0
        self.scheduler.wake()
        while (pick := self.scheduler.next(client.window_free, client.config.window)) is not None:
            source, limit = pick
            items = source.messages_to_send(limit)
            if not items:
                self.scheduler.idle(source)
            for item in items:
                try:
                    seq = client.send(item.message, self.now)
                except MessageTooLarge as exc:  # as HubLink._too_large
                    handler = getattr(source, "too_large", None)
                    if handler is None:
                        self.scheduler.idle(source)
                    else:
                        handler(item, exc)
                    continue
                source.sent(item, seq)
                if seq is not None:
                    self.store.note_seq_used(seq)
                sent += 1
        return sent

    def deliver(self, *, ack: bool = True) -> None:
        assert self.client is not None and self.server is not None
        self.server.receive_data(self.client.data_to_send(), self.now)
        for event in self.server.events_received():
            if isinstance(event, MessageReceived):
                self.received.append(event.message)
        if not ack:
            return
        self.now += 1.0
        self.server.handle_timer(self.now)
        self.client.receive_data(self.server.data_to_send(), self.now)
        for event in self.client.events_received():
            if isinstance(event, Acked):
                self.source.acked(event.up_to)

    def drop(self) -> None:
        self.client = self.server = None
        self.source.session_ended()


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
    edge = Edge(store, source, limit=LIMIT)
    edge.connect()
    twins.report(
        "default",
        "thermo-1",
        [Reading("label", "x" * BIG), Reading("temperature", 19.5)],
        now=NOW,
    )
    assert edge.drain() == 1  # the temperature; the label is over the hub's 8 KiB
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
    assert edge.drain() == 0
    twins.report("default", "thermo-1", [Reading("label", "short")], now=NOW + 1)
    assert edge.drain() == 1
    edge.deliver()
    assert (edge.received[-1].property, edge.received[-1].value) == ("label", "short")
    assert store.dead_letter_count() == 1


def test_a_history_entry_over_the_limit_never_drops_older_unacked_ones(store: Store) -> None:
    """History of one property: v1 small, v2 too large, v3 small. v2 is dead-lettered while
    v1 is still unacknowledged; the session drops; v1 and v3 go again (v2 does not), and
    only then is v2 dropped from the history."""
    twins = _twins(store)
    source = TwinSource(twins, dead_letters=store, node_name=NODE)
    edge = Edge(store, source, limit=LIMIT)
    edge.connect()
    for i, value in enumerate(["a", "x" * BIG, "b"]):
        twins.report("default", "thermo-1", [Reading("label", value)], now=NOW + i, history=True)
    assert edge.drain() == 3  # the latest report ("b"), history v1 and v3
    edge.deliver(ack=False)
    edge.drop()
    assert len(twins.pending_history()) == 3  # v2 too: v1 before it is not acknowledged
    edge.connect()
    assert edge.drain() == 3  # the same three again, not v2
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
    edge = Edge(store, source, limit=LIMIT)
    edge.connect()
    twins.report(
        "default",
        "thermo-1",
        [Reading("label", "x" * BIG), Reading("temperature", 1.0)],
        now=NOW,
    )
    assert edge.drain() == 1 and edge.drain() == 0
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


def test_a_metrics_batch_over_the_limit_is_dead_lettered_behind_unacked_ones(
    store: Store, tmp_path: pathlib.Path
) -> None:
    """Batch 1 (2 samples) fits and is in flight; batch 2 (4 samples) is over the limit:
    dead-lettered, kept in the forwarder until batch 1 is acknowledged (an ack covers the
    earlier batches), then dropped, and the batches after it go."""
    samples = typical_node_samples(12)
    small, large = _sizes(tmp_path / "sizes", samples)
    settings = MetricsSettings(
        sample_interval_s=60, batch_interval_s=60, state_dir=str(tmp_path), batch_max_samples=4
    )
    forwarder = MetricsForwarder(store.metrics(), settings)
    source = MetricsSource(NODE, dead_letters=store)
    source.attach(forwarder)
    edge = Edge(store, source, limit=(small + large) // 2)
    edge.connect()
    for sample in samples[:2]:
        forwarder.add(sample)
    assert edge.drain() == 1  # batch 1
    for sample in samples[2:6]:
        forwarder.add(sample)
    source.batch_due()
    assert edge.drain() == 0  # batch 2: too large
    assert [b.batch_seq for b in forwarder.unacked()] == [1, 2]  # 1 is not acked yet
    samples_2 = forwarder.unacked()[1].message(NODE).samples
    edge.deliver(ack=False)
    edge.drop()
    edge.connect()
    assert edge.drain() == 1  # batch 1 again, not batch 2
    edge.deliver()
    assert forwarder.unacked() == []  # 1 acknowledged, then 2 dropped: dead-lettered
    (dead,) = store.dead_letters()
    assert dead.kind == "metrics_batch" and dead.body["batch_seq"] == 2
    assert dead.size > (small + large) // 2
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
    assert edge.drain() == 1
    edge.deliver()
    batches = [m for m in edge.received if isinstance(m, MetricsBatch)]
    assert len(batches) == 3 and forwarder.unacked() == [] and forwarder.backlog() == 0


def test_a_metrics_batch_over_the_limit_at_the_head_is_dropped_at_once(
    store: Store, tmp_path: pathlib.Path
) -> None:
    samples = typical_node_samples(8)
    small, large = _sizes(tmp_path / "sizes", samples)
    settings = MetricsSettings(
        sample_interval_s=60, batch_interval_s=60, state_dir=str(tmp_path), batch_max_samples=4
    )
    forwarder = MetricsForwarder(store.metrics(), settings)
    source = MetricsSource(NODE, dead_letters=store)
    source.attach(forwarder)
    edge = Edge(store, source, limit=(small + large) // 2)
    edge.connect()
    for sample in samples[:6]:
        forwarder.add(sample)
    assert edge.drain() == 1  # batch 1 (4 samples) dead at once, then batch 2 (2) goes
    assert [b.batch_seq for b in forwarder.unacked()] == [2]
    edge.deliver()
    assert forwarder.unacked() == [] and store.dead_letter_count() == 1
