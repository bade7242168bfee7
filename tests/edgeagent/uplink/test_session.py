"""The hub connection service in this process (a real agent core on the process runtime,
a real hub on the embedded API, real QUIC), for what is only visible from inside: the
extension points, the clock-skew warning, bad outbox entries, missing credentials, a store
that cannot keep an object."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from cloudhub.kube import NODES, KubeClient
from edgeagent.agent import Agent
from edgeagent.errors import HubUnavailable, StoreError, StoreFullError
from edgeagent.sdnotify import Notifier
from edgeagent.settings import (
    AgentSettings,
    HubSettings,
    PodSettings,
    RuntimeSettings,
    StoreSettings,
)
from edgeagent.uplink.scheduler import Priority
from edgeagent.uplink.session import HubLink
from edgeagent.uplink.sources.base import Outgoing
from protocol.errors import ErrorCode
from protocol.messages import Error, KubeEvent, ObjectRef, ObjectUpsert, PodStatus
from tests.edgeagent.hublink.fleet import HubRunner, eventually, free_port, write_node_pki

NOWHERE = ObjectRef("Pod", "default", "nowhere", "00000000-0000-0000-0000-000000000000")


class InProcessAgent:
    """``Agent`` + ``HubLink`` on the test's event loop."""

    def __init__(self, settings: AgentSettings, link: HubLink) -> None:
        self.settings = settings
        self.link = link
        self.agent = Agent(settings, notifier=Notifier.from_env({}), services=[link])
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.agent.run(self._stop), name="test-agent")

    @property
    def store(self):
        assert self.agent.context is not None
        return self.agent.context.store

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 30)
            self._task = None

    async def connected(self) -> None:
        await eventually(lambda: self.link.connection_id() is not None, "hub session open")


@pytest.fixture
async def hub(api, pki_ca) -> AsyncIterator[HubRunner]:
    runner = HubRunner(api.kubeconfig_path, pki_ca.server, free_port())
    await runner.start()
    try:
        yield runner
    finally:
        await runner.stop()


@pytest.fixture
async def make_agent(
    hub: HubRunner, pki_ca, tmp_path: pathlib.Path
) -> AsyncIterator[Callable[..., InProcessAgent]]:
    agents: list[InProcessAgent] = []

    def make(
        node: str = "edge-in", *, pki: bool = True, start: bool = True, **link_kwargs: Any
    ) -> InProcessAgent:
        state = tmp_path / node
        if pki:
            write_node_pki(state / "pki", pki_ca.ca, node)
        settings = AgentSettings(
            node_name=node,
            state_dir=state,
            node_ip="127.0.0.1",
            runtime=RuntimeSettings(kind="process"),
            store=StoreSettings(commit_delay=0.05),
            pods=PodSettings(backoff_initial=0.4, backoff_max=3, resync_period=2),
            hub=HubSettings(url=hub.url, backoff_base=0.1, backoff_cap=0.5, healthy_after=0.5),
        )
        agent = InProcessAgent(settings, HubLink(**link_kwargs))
        agents.append(agent)
        if start:
            agent.start()
        return agent

    try:
        yield make
    finally:
        for agent in agents:
            await agent.stop()


async def test_extension_points(make_agent, hub: HubRunner):
    errors: list[Error] = []
    sessions: list[str] = []
    ended = asyncio.Event()

    class Source:
        """An up-going stream with its own outbox, as the device twins and metrics have."""

        name = "test-source"
        priority = Priority.STATUS

        def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
            return lambda: None

        def __init__(self) -> None:
            self.queue: list[KubeEvent] = []
            self.seqs: dict[int, KubeEvent] = {}
            self.acked_up_to = 0
            self.started: list[int] = []
            self.ended = 0

        def messages_to_send(self, limit: int) -> list[Outgoing]:
            out, self.queue = self.queue[:limit], self.queue[limit:]
            return [Outgoing(m, i) for i, m in enumerate(out)]

        def sent(self, item: Outgoing, seq: int | None) -> None:
            assert seq is not None
            self.seqs[seq] = item.message

        def acked(self, up_to: int) -> None:
            self.acked_up_to = max(self.acked_up_to, up_to)

        def session_started(self, received_up_to: int) -> None:
            self.started.append(received_up_to)

        def session_ended(self) -> None:
            self.ended += 1

    async def per_session(link) -> None:
        sessions.append(link.transport)
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    source = Source()
    link = HubLink()
    link.register(Error, errors.append)  # replaces the built-in logger
    link.add_source(source)
    link.add_session_task(per_session)
    with pytest.raises(ValueError):
        link.register(PodStatus, errors.append)  # the hub never sends it
    with pytest.raises(HubUnavailable):
        await link.send(PodStatus(ref=NOWHERE, status={}, observed_at=time.time()))

    agent = make_agent(start=False)
    agent.link = link
    agent.agent.services = [link]
    agent.start()
    await agent.connected()
    first = link.connection_id()
    # the session task starts beside the session (connected() may return first)
    await eventually(
        lambda: sessions == ["quic"], "the session task started", state=lambda: sessions
    )
    assert len(source.started) == 1

    # a source's message goes up, numbered, and its ack comes back
    source.queue.append(
        KubeEvent(
            ref=NOWHERE,
            type="Normal",
            reason="Test",
            message="from a source",
            timestamp=time.time(),
        )
    )
    link.kick()
    await eventually(lambda: source.seqs, "the source's message sent")
    [seq] = source.seqs
    await eventually(lambda: source.acked_up_to >= seq, "the source told of its ack")

    # a pushed message: its on_acked runs; the hub's answer goes to the registered handler
    acked = asyncio.Event()
    pushed = await link.send(
        PodStatus(ref=NOWHERE, status={"phase": "Running"}, observed_at=time.time()),
        on_acked=acked.set,
    )
    assert pushed is not None and pushed > seq
    await asyncio.wait_for(acked.wait(), 30)
    # (other streams of the agent, metrics, may draw answers too: look for ours)
    answers = await eventually(
        lambda: [e for e in errors if e.in_reply_to == pushed], "the hub's answer handled"
    )
    assert answers[0].code in (ErrorCode.NOT_FOUND, ErrorCode.FORBIDDEN)
    assert agent.store.next_seq() > pushed  # seqs used by pushes are never reused

    # a new session: the session task is cancelled and started again, ids change
    await hub.stop()
    await asyncio.wait_for(ended.wait(), 30)
    assert link.connection_id() is None
    await hub.start()
    await agent.connected()
    assert link.connection_id() != first
    await eventually(
        lambda: sessions == ["quic", "quic"],
        "the session task started again",
        state=lambda: sessions,
    )
    assert len(source.started) == 2 and source.ended == 1


async def test_clock_skew_is_logged_with_both_times(make_agent, caplog):
    caplog.set_level(logging.WARNING, logger="edgeagent.uplink")
    agent = make_agent(wall_clock=lambda: time.time() + 3600)
    await agent.connected()
    [line] = [r.getMessage() for r in caplog.records if "clock skew" in r.getMessage()]
    assert "ahead by 3600 s" in line or "ahead by 3599 s" in line or "ahead by 3601 s" in line
    assert line.count("T") >= 2 and "+00:00" in line  # both times, ISO 8601 UTC
    assert agent.link.skew is not None and 3590 < agent.link.skew < 3610


async def test_no_skew_warning_when_clocks_agree(make_agent, caplog):
    caplog.set_level(logging.WARNING, logger="edgeagent.uplink")
    agent = make_agent()
    await agent.connected()
    assert not [r for r in caplog.records if "clock skew" in r.getMessage()]
    assert abs(agent.link.skew) < 60


async def test_a_bad_outbox_entry_is_dropped_and_the_rest_delivered(
    make_agent, tmp_path: pathlib.Path, caplog
):
    caplog.set_level(logging.ERROR, logger="edgeagent.uplink")
    from edgeagent.store import Store

    state = tmp_path / "edge-bad"
    store = Store.open(state / "store.db")
    ref = {"kind": "Pod", "namespace": "default", "name": "nowhere", "uid": NOWHERE.uid}
    store.outbox_append("event", {"ref": ref, "type": "Normal"})  # reason, message… missing
    store.outbox_append("no_such_kind", {"x": 1})
    store.record_pod_status(NOWHERE, {"phase": "Running"}, time.time())
    store.close()
    agent = make_agent("edge-bad")
    await agent.connected()
    await eventually(lambda: agent.store.outbox_depth() == 0, "the outbox drained")
    dropped = [
        r.getMessage() for r in caplog.records if "dropping outbox message" in r.getMessage()
    ]
    assert len(dropped) == 2 and "event" in dropped[0] and "no_such_kind" in dropped[1]


async def test_missing_credentials_agent_runs_and_connects_once_joined(make_agent, pki_ca, caplog):
    caplog.set_level(logging.ERROR, logger="edgeagent.uplink")
    agent = make_agent("edge-late", pki=False)
    await eventually(lambda: agent.agent.context is not None, "the agent ready without a hub")
    await eventually(
        lambda: any("has not joined" in r.getMessage() for r in caplog.records),
        "a clear error naming the join",
    )
    assert agent.link.connection_id() is None
    session = agent.store.get_state("hub.session")
    assert session["state"] == "no-credentials" and "edgeagent join" in session["reason"]
    write_node_pki(agent.settings.state_dir / "pki", pki_ca.ca, "edge-late")  # "join"
    await agent.connected()  # picked up with no restart


async def test_store_failure_on_an_object_closes_the_session_and_the_hub_resends(
    make_agent, hub: HubRunner, api, namespace: str, kube: KubeClient
):
    from cloudhub.kube import CONFIGMAPS, PODS
    from tests.edgeagent.hublink.objects import configmap, pod

    failures = []
    agent_ref: list[InProcessAgent] = []

    def flaky(message) -> None:
        assert isinstance(message, ObjectUpsert)
        if message.ref.kind == "ConfigMap" and not failures:
            failures.append(message.ref.name)
            raise StoreFullError("disk full (simulated)", path="store.db")
        agent_ref[0].store.apply_upsert(message.ref, message.resource_version, message.object)

    link = HubLink()
    link.register(ObjectUpsert, flaky)
    agent = make_agent("edge-flaky", start=False)
    agent.link = link
    agent.agent.services = [link]
    agent_ref.append(agent)
    agent.start()
    await agent.connected()
    first = link.connection_id()
    await kube.create(CONFIGMAPS, configmap("cfg", namespace, {"k": "v"}))
    spec = pod("user", namespace, "edge-flaky", "exec sleep 600")
    spec["spec"]["volumes"] = [{"name": "c", "configMap": {"name": "cfg"}}]
    await kube.create(PODS, spec)
    await eventually(
        lambda: agent.store.find_object("ConfigMap", namespace, "cfg") is not None,
        "the ConfigMap stored after a resync",
    )
    assert failures == ["cfg"]
    assert link.connection_id() not in (None, first)  # a new session resent it
    assert isinstance(StoreFullError("x"), StoreError)


async def test_node_object_reports_reserved_resources(make_agent, kube: KubeClient):
    agent = make_agent("edge-res", start=False)
    agent.settings = dataclasses.replace(
        agent.settings,
        node=dataclasses.replace(agent.settings.node, reserved_cpu=500, max_pods=20),
    )
    agent.agent.settings = agent.settings
    agent.start()
    await agent.connected()

    async def node():
        try:
            return await kube.get(NODES, "edge-res")
        except Exception:
            return None

    n = await eventually(node, "Node edge-res")
    cpu = int(n["status"]["capacity"]["cpu"])
    assert n["status"]["allocatable"]["cpu"] == f"{cpu * 1000 - 500}m"
    assert n["status"]["capacity"]["pods"] == "20"


async def test_a_bad_sent_message_is_dropped_not_resent_forever(
    make_agent, tmp_path: pathlib.Path, caplog
):
    caplog.set_level(logging.ERROR, logger="edgeagent.uplink")
    from edgeagent.store import Store

    store = Store.open(tmp_path / "edge-sent" / "store.db")
    bad = store.outbox_append("pod_status", {"ref": {"uid": "x"}})  # sent, then a rule changed
    store.outbox_mark_sent(bad, store.next_seq())
    store.record_pod_status(NOWHERE, {"phase": "Running"}, time.time())
    store.close()
    agent = make_agent("edge-sent")
    await agent.connected()
    await eventually(lambda: agent.store.outbox_depth() == 0, "the outbox drained")
    assert any("dropping sent outbox message" in r.getMessage() for r in caplog.records)


async def test_an_invalid_node_name_is_one_clear_error_and_pods_run(make_agent, caplog):
    caplog.set_level(logging.ERROR, logger="edgeagent.uplink")
    agent = make_agent("edge_underscore", pki=False)
    await eventually(
        lambda: any("cannot connect to the hub" in r.getMessage() for r in caplog.records),
        "the error naming the node name",
    )
    [line] = [r.getMessage() for r in caplog.records if "cannot connect" in r.getMessage()]
    assert "edge_underscore" in line and "RFC 1123" in line
    assert agent.agent.context is not None  # the agent runs (pods would too)
    assert agent.store.get_state("hub.session")["state"] == "disconnected"


async def test_the_agents_own_sources_are_drained_after_the_outbox(make_agent, hub: HubRunner):
    """An agent context that carries ``sources`` (device twins and metrics, with their own
    outboxes) gets them drained, woken through ``add_wakeup``, told of sessions and acks."""
    import types

    class Streams:
        name = "test-streams"
        priority = Priority.BULK

        def __init__(self) -> None:
            self.queue: list[KubeEvent] = []
            self.in_flight: dict[int, KubeEvent] = {}
            self.delivered: list[KubeEvent] = []
            self.sessions: list[int] = []
            self.wakeups: list[Callable[[], None]] = []

        def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
            self.wakeups.append(callback)
            return lambda: self.wakeups.remove(callback)

        def report(self, message: KubeEvent) -> None:
            self.queue.append(message)
            for wake in self.wakeups:
                wake()

        def session_started(self, received_up_to: int) -> None:
            self.sessions.append(received_up_to)

        def session_ended(self) -> None:
            pass

        def messages_to_send(self, limit: int) -> list[Outgoing]:
            return [Outgoing(m) for m in self.queue[:limit]]

        def sent(self, item: Outgoing, seq: int | None) -> None:
            assert seq is not None
            self.queue.remove(item.message)
            self.in_flight[seq] = item.message

        def acked(self, up_to: int) -> None:
            for seq in sorted(s for s in self.in_flight if s <= up_to):
                self.delivered.append(self.in_flight.pop(seq))

    streams = Streams()
    link = HubLink()

    class WithStreams:
        name = "hub"

        async def run(self, ctx) -> None:
            await link.run(types.SimpleNamespace(**{**vars(ctx), "sources": (streams,)}))

    agent = make_agent("edge-streams", start=False)
    agent.link = link
    agent.agent.services = [WithStreams()]
    agent.start()
    await agent.connected()
    assert streams.sessions == [0] and len(streams.wakeups) == 1
    event = KubeEvent(
        ref=NOWHERE, type="Normal", reason="Reported", message="x", timestamp=time.time()
    )
    streams.report(event)
    await eventually(lambda: streams.delivered == [event], "the stream's message acknowledged")
    await agent.stop()
    assert streams.wakeups == []  # unhooked when the service stopped


async def test_a_twin_report_over_the_hub_limit_is_dead_lettered_in_session(
    make_agent, hub: HubRunner
):
    """Issue 15 gap, through the real ``HubLink`` and a real hub whose message limit is
    8 KiB: a 12 KiB twin report is dead-lettered (the store's table, a Warning Event queued
    and sent up) and the report made with it goes, in the same session. (This hub runs no
    device extension: it answers both with an error, and acknowledges them.)"""
    import types

    from edgeagent.devices import EdgeTwins, Reading
    from edgeagent.uplink.sources.twins import TwinSource
    from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device

    await hub.stop()
    await hub.start(**{"session.max_message_size": 8 * 1024})
    link = HubLink()
    made: dict[str, Any] = {}

    class WithTwins:
        name = "hub"

        async def run(self, ctx) -> None:
            twins = EdgeTwins(ctx.store.twins())
            twins.upsert_model(THERMOSTAT_MODEL)
            twins.upsert_device(device(properties=[{"name": "temperature"}, {"name": "label"}]))
            source = TwinSource(twins, dead_letters=ctx.store, node_name=ctx.node_name)
            made.update(twins=twins)
            try:
                await link.run(types.SimpleNamespace(**{**vars(ctx), "sources": (source,)}))
            finally:
                source.close()

    agent = make_agent("edge-twin-big", start=False)
    agent.link = link
    agent.agent.services = [WithTwins()]
    agent.start()
    await agent.connected()
    session = link.connection_id()
    twins = made["twins"]
    readings = [Reading("label", "x" * (12 * 1024)), Reading("temperature", 19.5)]
    twins.report("default", "thermo-1", readings, now=time.time())
    await eventually(lambda: twins.pending_reports() == [], "no twin report left pending")
    (dead,) = agent.store.dead_letters()
    assert dead.kind == "twin_reported" and dead.body["property"] == "label"
    assert "over 8192 bytes" in dead.reason
    await eventually(lambda: agent.store.outbox_depth() == 0, "the Warning Event sent up")
    assert link.connection_id() == session  # one session: nothing was closed over it
