"""Reconnects: hub restart, fast agent restart, messages in flight when a link is cut."""

from __future__ import annotations

import asyncio
import time

from cloudhub.errors import KubeNotFound
from cloudhub.kube import CONFIGMAPS, LEASES, NODES, PODS, KubeClient, parse_time
from protocol.messages import Message, ObjectUpsert
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, configmap, eventually, pod


def uid(obj: dict) -> str:
    return obj["metadata"]["uid"]


def desired(pods: list[dict], node: str, cm: dict) -> dict[str, str]:
    """uid -> resourceVersion a node should hold: its pods and the shared ConfigMap."""
    out = {uid(p): p["metadata"]["resourceVersion"] for p in pods if p["spec"]["nodeName"] == node}
    out[uid(cm)] = cm["metadata"]["resourceVersion"]
    return out


async def test_hub_restart_every_node_resyncs_nothing_missing_or_duplicated(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    hub = await hubs.start()
    ports = {"listen.quic_port": hub.quic_port, "listen.websocket_port": hub.websocket_port}
    agents = [
        hubs.agent(unique(f"edge-r{i}"), transport="quic" if i % 2 else "websocket")
        for i in range(4)
    ]
    cm = await kube.create(CONFIGMAPS, configmap("shared", namespace, {"k": "v"}))
    volume = [{"name": "c", "configMap": {"name": "shared"}}]
    for agent in agents:
        for j in range(2):
            await kube.create(PODS, pod(f"{agent.name}-{j}", namespace, agent.name, volumes=volume))
    for agent in agents:
        await agent.wait_for(lambda a=agent: len(a.store) == 3 and a.all_acked, DEADLINE)
    sessions = {a.name: a.sessions for a in agents}

    await hubs.stop(hub)
    # while the hub is down: one pod deleted for good, one added
    victim = agents[0]
    gone = f"{victim.name}-0"
    await kube.delete(PODS, gone, namespace, grace_period_seconds=0)
    await kube.create(PODS, pod(f"{agents[1].name}-new", namespace, agents[1].name))

    await hubs.start(ports)
    for agent in agents:
        await agent.wait_for(lambda a=agent: a.sessions > sessions[a.name] and a.synced, DEADLINE)
    pods, _ = await kube.list(PODS, namespace)
    for agent in agents:
        want = desired(pods, agent.name, cm)
        await agent.wait_for(lambda a=agent, w=want: a.inventory() == w, DEADLINE)
        # no object was ever sent twice at the same resourceVersion
        assert max(agent.upserts.values()) == 1, agent.upserts
        assert agent.sync_done[-1] == len(want)
    assert gone not in [ref.name for ref, _, _ in victim.store.values()]
    assert victim.deletes  # the pod deleted while the hub was down was removed


async def test_fast_agent_restart_new_session_keeps_receiving(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    hub = await hubs.start()
    name = unique("edge-fast")
    old = hubs.agent(name)
    await old.wait_for(lambda: old.synced, DEADLINE)
    await eventually(lambda: _lease_renewed_since(kube, name, 0.0), "the first Lease")
    first = await kube.create(PODS, pod("first", namespace, name))
    await old.wait_for(lambda: uid(first) in old.store, DEADLINE)

    # The agent restarts faster than its old connection is noticed as dead: the old
    # process froze (its link still open), the new one dials with the same store.
    old.abandon()
    new = old.restarted()
    hubs.agents.append(new)
    new.start()
    await new.wait_for(lambda: new.synced, DEADLINE)
    # the hub superseded the old session; its cleanup ran after the new one took over
    await old.wait_for(lambda: not old.connected, DEADLINE)
    current = hub.registry.get(name)
    assert current is not None and not current.closed

    second = await kube.create(PODS, pod("second", namespace, name))
    await new.wait_for(lambda: uid(second) in new.store, DEADLINE)
    # the Lease is still renewed and the node stays Ready well past the grace period
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 2.5  # > not_ready_grace (1.5 s) + a renewal
    while loop.time() < deadline:
        await asyncio.sleep(0.25)
        assert new.connected
    assert await _lease_renewed_since(kube, name, 1.0)
    node = await kube.get(NODES, name)
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


async def _lease_renewed_since(kube: KubeClient, name: str, seconds: float) -> bool:
    """The Lease exists (``seconds`` 0) or was renewed within the last ``seconds``."""
    try:
        lease = await kube.get(LEASES, name, "kube-node-lease")
    except KubeNotFound:
        return False
    renewed = parse_time(lease["spec"]["renewTime"])
    return renewed is not None and (seconds == 0.0 or time.time() - renewed < seconds)


async def test_object_in_flight_when_the_link_is_cut_arrives_after_reconnect(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    name = unique("edge-cut-down")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    sessions = agent.sessions

    def is_pod(message: Message) -> bool:
        return isinstance(message, ObjectUpsert) and message.ref.kind == "Pod"

    agent.cut_on(is_pod)  # the upsert is lost with the link, unapplied
    created = await kube.create(PODS, pod("web", namespace, name))
    await agent.wait_for(lambda: agent.sessions > sessions, DEADLINE)
    await agent.wait_for(lambda: uid(created) in agent.store, DEADLINE)
    assert agent.upserts[uid(created), created["metadata"]["resourceVersion"]] == 1


async def test_status_in_flight_when_the_link_is_cut_is_resent_and_written(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    # One status write every 2 s: the second pod's status waits in the hub for a token.
    hub = await hubs.start({"status.qps": 0.5, "status.burst": 1})
    name = unique("edge-cut-up")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    a = await kube.create(PODS, pod("a", namespace, name))
    await agent.wait_for(lambda: uid(a) in agent.store and agent.all_acked, DEADLINE)
    b = await kube.create(PODS, pod("b", namespace, name))
    await agent.wait_for(lambda: uid(b) in agent.store and bool(agent.unacked), DEADLINE)
    in_flight = dict(agent.unacked)
    await eventually(_async(lambda: len(hub.pod_writer) == 1), "the status queued in the hub")
    assert hub.pod_writer is not None
    sessions = agent.sessions
    agent.cut()
    await agent.wait_for(lambda: agent.sessions > sessions, DEADLINE)
    # resent with its seq in the new session, acknowledged once durable
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    current = await kube.get(PODS, "b", namespace)
    assert current["status"]["phase"] == "Running"
    assert hub.metrics.registry.get_sample_value("edgefleet_hub_resends_total") >= len(in_flight)


async def test_status_pending_when_the_hub_stops_is_written_by_the_next_hub(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    hub = await hubs.start({"status.qps": 0.05, "status.burst": 1})
    ports = {"listen.quic_port": hub.quic_port, "listen.websocket_port": hub.websocket_port}
    name = unique("edge-hub-crash")
    agent = hubs.agent(name, transport="quic")
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    a = await kube.create(PODS, pod("a", namespace, name))
    await agent.wait_for(lambda: uid(a) in agent.store and agent.all_acked, DEADLINE)
    b = await kube.create(PODS, pod("b", namespace, name))
    await agent.wait_for(lambda: uid(b) in agent.store and bool(agent.unacked), DEADLINE)
    await eventually(_async(lambda: len(hub.pod_writer) == 1), "the status queued in the hub")
    await hubs.stop(hub)  # the write never happened; the edge still holds the message
    assert agent.unacked
    assert (await kube.get(PODS, "b", namespace)).get("status", {}).get("phase") != "Running"
    await hubs.start(ports)
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    assert (await kube.get(PODS, "b", namespace))["status"]["phase"] == "Running"


def _async(check):
    async def wrapped() -> bool:
        return check()

    return wrapped
