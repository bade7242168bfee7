"""The default edge liveness profile keeps the node lifecycle semantics (issue 18 item 5),
against the embedded API and the reference kube-apiserver, with every duration of the
default profile divided by ten (Lease renewed every 3.2 s ± 5 % with leaseDurationSeconds 4,
a 4 s grace, ``ha.shutdown_spread_max`` 1.5 s): a healthy node's Lease is never older than
the grace and its Node never leaves Ready; a dead node is Unknown within the grace (plus one
write); a planned stop of its replica hands it over with its Lease never older than the
grace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from cloudhub.kube import LEASES, NODES, Informer, KubeClient
from cloudhub.kube.times import parse_time
from tests.cloudhub.ha.conftest import ha_settings
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually

pytestmark = pytest.mark.parametrize("cluster", BOTH, indirect=True)

INTERVAL_S, JITTER, GRACE_S = 3.2, 0.05, 4.0
PROFILE = {
    "nodes.lease_interval": INTERVAL_S,
    "nodes.lease_jitter": JITTER,
    "nodes.lease_duration": 4,
    "nodes.not_ready_grace": GRACE_S,
    "nodes.status_report_interval": 60.0,
    "ha.shutdown_spread_max": 1.5,
}
WRITE_S = 0.5  # room for one Lease write on a loaded machine


def _ready(node: dict) -> str:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") or ""
    return ""


class Seen:
    """renewTimes of one node's Lease and the Ready statuses of its Node, from watches."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.renewed: list[float] = []
        self.ready: list[str] = []

    def on_lease(self, event: str, lease: dict, old: dict | None) -> None:
        if lease["metadata"]["name"] != self.node:
            return
        at = parse_time((lease.get("spec") or {}).get("renewTime"))
        if at is not None and (not self.renewed or at > self.renewed[-1]):
            self.renewed.append(at)

    def on_node(self, event: str, node: dict, old: dict | None) -> None:
        if node["metadata"]["name"] == self.node and event != "DELETED":
            status = _ready(node)
            if status and (not self.ready or self.ready[-1] != status):
                self.ready.append(status)

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.renewed, self.renewed[1:], strict=False)]


@pytest.fixture
async def seen(kube: KubeClient, namespace: str, node_name: str) -> AsyncIterator[Seen]:
    s = Seen(node_name)
    leases = Informer(kube, LEASES, namespace=namespace)
    nodes = Informer(kube, NODES)
    leases.add_handler(s.on_lease)
    nodes.add_handler(s.on_node)
    tasks = [asyncio.get_running_loop().create_task(i.run()) for i in (leases, nodes)]
    try:
        await eventually(lambda: leases.synced.is_set() and nodes.synced.is_set(), "watches")
        yield s
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_healthy_node_stays_ready_and_a_dead_one_is_unknown_within_the_grace(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, seen: Seen
) -> None:
    await hubs.start(ha_settings(namespace, "replica-a", **PROFILE))
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await eventually(lambda: seen.ready[-1:] == ["True"], f"Node {node_name} Ready")
    await eventually(lambda: len(seen.renewed) >= 5, "four renewals", timeout=60)
    gaps = seen.gaps()
    assert max(gaps) <= INTERVAL_S * (1 + JITTER) + WRITE_S < GRACE_S, gaps
    assert min(gaps[1:]) >= INTERVAL_S * (1 - JITTER) - WRITE_S, gaps  # never faster
    assert seen.ready == ["True"]  # healthy: never anything else
    await agent.stop()  # the node dies
    stopped = time.monotonic()

    async def unknown() -> bool:
        return _ready(await kube.get(NODES, node_name)) == "Unknown"

    await eventually(unknown, f"Node {node_name} Ready=Unknown")
    assert time.monotonic() - stopped <= GRACE_S + 2 * WRITE_S
    assert seen.ready[-1] == "Unknown"
    await kube.delete(NODES, node_name)  # the reference API is shared


async def test_a_planned_stop_hands_the_node_over_before_its_lease_passes_the_grace(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, seen: Seen
) -> None:
    a = await hubs.start(ha_settings(namespace, "replica-a", **PROFILE))
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await eventually(lambda: seen.ready[-1:] == ["True"], f"Node {node_name} Ready")
    b = await hubs.start(ha_settings(namespace, "replica-b", **PROFILE))
    agent.websocket_port = b.websocket_port or 0  # the Service routes to B only now
    await eventually(lambda: len(seen.renewed) >= 2, "a renewal by A", timeout=30)
    await hubs.stop(a)
    await agent.wait_for(lambda: agent.synced and agent.sessions == 2, DEADLINE)
    handed_over = len(seen.renewed)
    await eventually(lambda: len(seen.renewed) >= handed_over + 2, "renewals by B", timeout=30)
    assert max(seen.gaps()) < GRACE_S, seen.gaps()
    assert seen.ready == ["True"]
    await kube.delete(NODES, node_name)
