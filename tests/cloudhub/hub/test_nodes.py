"""Edge nodes as Kubernetes Nodes: registration, Lease renewal, Ready, Ready=Unknown, deletion."""

from __future__ import annotations

import pytest

from cloudhub.errors import KubeNotFound
from cloudhub.kube import EVENTS, LEASES, NODES, KubeClient, parse_time
from protocol.errors import CloseCode
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually

pytestmark = pytest.mark.parametrize("cluster", BOTH, indirect=True)


def condition(node: dict, type_: str) -> dict:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c
    return {}


@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_first_session_registers_the_node_and_renews_its_lease(
    hubs: Hubs, kube: KubeClient, unique, transport: str
) -> None:
    await hubs.start()
    name = unique("edge-reg")
    agent = hubs.agent(name, transport=transport)
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    async def registered() -> bool:
        try:
            node = await kube.get(NODES, name)
        except KubeNotFound:
            return False
        return condition(node, "Ready").get("status") == "True"

    await eventually(registered, f"Node {name} Ready")
    node = await kube.get(NODES, name)
    labels = node["metadata"]["labels"]
    assert labels["node-role.kubernetes.io/edge"] == ""
    assert labels["edgefleet.io/site"] == "sim"  # reported by the agent
    assert labels["kubernetes.io/arch"] == "arm64"
    assert labels["kubernetes.io/hostname"] == name
    status = node["status"]
    assert status["capacity"]["cpu"] == "4" and status["capacity"]["pods"] == "110"
    assert status["allocatable"]["cpu"] == "3800m"
    assert status["nodeInfo"]["architecture"] == "arm64"
    assert status["nodeInfo"]["kubeletVersion"] == "edgeagent-sim-0.1"
    assert {"type": "InternalIP", "address": "10.0.0.1"} in status["addresses"]
    assert condition(node, "MemoryPressure")["status"] == "False"
    assert node["metadata"]["annotations"]["edgefleet.io/transport"] == transport

    # the Lease exists, is held by the node, owned by the Node, and keeps being renewed
    await eventually(lambda: _lease_exists(kube, name), "the Lease")
    lease = await kube.get(LEASES, name, "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == name
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    first = parse_time(lease["spec"]["renewTime"])

    async def renewed() -> bool:
        current = await kube.get(LEASES, name, "kube-node-lease")
        return parse_time(current["spec"]["renewTime"]) > first + 0.4

    await eventually(renewed, "a later lease renewal")

    # the heartbeat (status_report_interval 1 s) is refreshed too
    heartbeat = parse_time(condition(node, "Ready")["lastHeartbeatTime"])

    async def heartbeat_refreshed() -> bool:
        current = await kube.get(NODES, name)
        return parse_time(condition(current, "Ready")["lastHeartbeatTime"]) > heartbeat

    await eventually(heartbeat_refreshed, "a fresh Ready heartbeat")

    # connected Event on the Node
    events, _ = await kube.list(EVENTS, "default", field_selector=f"involvedObject.name={name}")
    assert any(e["reason"] == "EdgeConnected" for e in events)


async def test_disconnect_stops_the_lease_and_sets_ready_unknown_after_the_grace(
    hubs: Hubs, kube: KubeClient, unique
) -> None:
    await hubs.start()
    name = unique("edge-gone")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await eventually(lambda: _lease_exists(kube, name), "the Lease")
    await agent.stop()
    disconnected_at = (await kube.get(LEASES, name, "kube-node-lease"))["spec"]["renewTime"]

    async def unknown() -> bool:
        node = await kube.get(NODES, name)
        return condition(node, "Ready").get("status") == "Unknown"

    await eventually(unknown, "Ready=Unknown")
    node = await kube.get(NODES, name)
    ready = condition(node, "Ready")
    assert ready["reason"] == "NodeStatusUnknown"
    for pressure in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert condition(node, pressure)["status"] == "Unknown"
    # not renewed after the disconnect, and not earlier than the grace period
    lease = await kube.get(LEASES, name, "kube-node-lease")
    assert lease["spec"]["renewTime"] == disconnected_at
    # (conditions carry whole seconds: allow one for the truncation)
    assert parse_time(ready["lastTransitionTime"]) >= parse_time(disconnected_at) + 1.5 - 1.0
    events, _ = await kube.list(EVENTS, "default", field_selector=f"involvedObject.name={name}")
    assert any(e["reason"] == "EdgeDisconnected" for e in events)

    # a new session makes it Ready again
    agent.start()
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    async def ready_again() -> bool:
        node = await kube.get(NODES, name)
        return condition(node, "Ready").get("status") == "True"

    await eventually(ready_again, "Ready=True after reconnect")


async def test_deleting_the_node_closes_its_session(hubs: Hubs, kube: KubeClient, unique) -> None:
    hub = await hubs.start()
    name = unique("edge-del")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await eventually(lambda: _registered(hub, name), "registration")
    sessions = agent.sessions
    await kube.delete(NODES, name)
    await agent.wait_for(
        lambda: any(c.code is CloseCode.UNAUTHORIZED for c in agent.closes), DEADLINE
    )
    closed = [c for c in agent.closes if c.code is CloseCode.UNAUTHORIZED][-1]
    assert "deleted" in closed.reason
    assert agent.sessions == sessions  # the close came from the hub, on that session


async def _lease_exists(kube: KubeClient, name: str) -> bool:
    try:
        await kube.get(LEASES, name, "kube-node-lease")
    except KubeNotFound:
        return False
    return True


async def _registered(hub, name: str) -> bool:
    return hub.lifecycle.registered(name)
