"""A stopping hub's handover (issue 18 items 5 and 6), against the embedded API and the
reference kube-apiserver: its GOING_AWAY ``retry_after`` is full jitter over a spread sized
by its session count and ``ha.shutdown_reconnect_rate`` (at most ``ha.shutdown_spread_max``),
real agents take it as their delay; it renews the node Leases that could go stale while the
agents wait; and a replica never re-reads the Lease of a node another live replica serves:
it looks again only when that replica's Lease is deleted or expires, then marks the node
Unknown if nobody renews it."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from cloudhub.errors import KubeNotFound
from cloudhub.ha import (
    OWNER_ANNOTATION,
    full_jitter,
    renew_before_stop,
    shutdown_spread,
)
from cloudhub.kube import LEASES, NODES, KubeClient, micro_time
from cloudhub.nodes.model import EDGE_ROLE_LABEL
from protocol.errors import CloseCode
from tests.cloudhub.ha.conftest import ha_settings, replica_lease, websocket_agent
from tests.cloudhub.ha.processes import Balancer
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually
from tests.cloudhub.kube.proxy import FaultyProxy
from tests.sim.fleet import node_credentials

# -- the policies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sessions", "rate", "cap", "spread"),
    [(0, 500.0, 15.0, 0.0), (1000, 500.0, 15.0, 2.0), (10_000, 500.0, 15.0, 15.0), (3, 2.0, 0, 0)],
)
def test_the_spread_is_sessions_over_the_rate_capped(
    sessions: int, rate: float, cap: float, spread: float
) -> None:
    assert shutdown_spread(sessions, rate, cap) == spread


@pytest.mark.parametrize(("sessions", "rate", "cap"), [(-1, 500.0, 15.0), (1, 0, 15.0), (1, 1, -1)])
def test_a_bad_spread_input_is_refused(sessions: int, rate: float, cap: float) -> None:
    with pytest.raises(ValueError):
        shutdown_spread(sessions, rate, cap)


def test_full_jitter_draws_over_the_whole_spread() -> None:
    draws = iter([0.0, 0.5, 0.999])
    jitter = full_jitter(4.0, lambda: next(draws))
    assert [jitter(), jitter(), round(jitter(), 3)] == [0.0, 2.0, 3.996]


def test_leases_that_could_pass_the_grace_during_the_spread_are_renewed() -> None:
    assert renew_before_stop(40.0, 15.0) == 20.0  # the defaults: Leases over 20 s old
    assert renew_before_stop(40.0, 2.0) == 33.0  # 1,000 nodes: only the stalest
    assert renew_before_stop(1.5, 15.0) == 0.0  # grace too short: every Lease


# -- a hub stopping -----------------------------------------------------------------------------

on_both_apis = pytest.mark.parametrize("cluster", BOTH, indirect=True)


@on_both_apis
@pytest.mark.parametrize(("rate", "cap", "spread"), [(4.0, 1.0, 1.0), (16.0, 30.0, 0.5)])
async def test_a_stopping_hub_spreads_its_agents_going_away_retry_after(
    hubs: Hubs, namespace: str, unique, rate: float, cap: float, spread: float
) -> None:
    hub = await hubs.start(
        ha_settings(
            namespace,
            "replica-a",
            **{"ha.shutdown_reconnect_rate": rate, "ha.shutdown_spread_max": cap},
        )
    )
    agents = [hubs.agent(unique(f"edge-spread-{i}"), backoff_cap=60.0) for i in range(8)]
    for agent in agents:
        await agent.wait_for(lambda a=agent: a.synced, DEADLINE)
    await hubs.stop(hub)
    for agent in agents:
        await agent.wait_for(lambda a=agent: bool(a.closes), DEADLINE)
    closes = [agent.closes[0] for agent in agents]
    assert {c.code for c in closes} == {CloseCode.GOING_AWAY}
    waits = [c.retry_after for c in closes]
    assert all(w is not None and 0 <= w < spread for w in waits), waits
    assert len(set(waits)) > 1, waits  # jittered, not one instant for the whole fleet


@on_both_apis
@pytest.mark.parametrize("stale", [True, False])
async def test_a_stopping_hub_renews_the_leases_that_could_go_stale_first(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, caplog, stale: bool
) -> None:
    caplog.set_level(logging.INFO)
    # A 40 s grace and 20 s renewals: with a 40 s spread every Lease could pass the grace
    # while its agent waits (renewed at stop); with none, a Lease just written cannot.
    overrides = {
        "nodes.lease_namespace": namespace,
        "nodes.lease_interval": 20.0,
        "nodes.lease_duration": 40,
        "nodes.not_ready_grace": 40.0,
        "ha.shutdown_reconnect_rate": 0.01,
        "ha.shutdown_spread_max": 40.0 if stale else 0.0,
    }
    hub = await hubs.start(overrides)
    agent = hubs.agent(node_name, backoff_cap=60.0)
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    async def renewed() -> str:
        try:
            return (await kube.get(LEASES, node_name, namespace))["spec"].get("renewTime", "")
        except KubeNotFound:
            return ""

    before = await eventually(renewed, f"node {node_name}'s Lease written")
    await hubs.stop(hub)
    after = await renewed()
    messages = [r.getMessage() for r in caplog.records]
    if stale:
        assert after > before
        assert any("stopping: renewed 1 node Leases older than 0.0 s" in m for m in messages)
    else:
        assert after == before
        assert any("stopping: renewed 0 node Leases older than 35.0 s" in m for m in messages)


@on_both_apis
async def test_a_real_agent_redials_after_the_shutdown_retry_after_not_its_backoff(
    hubs: Hubs, namespace: str, unique
) -> None:
    # One session, 1 reconnect/s: a spread of 1 s. The agent's own back-off is 30 s; it
    # is served by the other replica well before that.
    more = {"ha.shutdown_reconnect_rate": 1.0, "ha.shutdown_spread_max": 5.0}
    a = await hubs.start(ha_settings(namespace, "replica-a", **more))
    b = await hubs.start(ha_settings(namespace, "replica-b", **more))
    name = unique("edge-redial")
    credentials = node_credentials(hubs.pki.ca, name)
    links: list = []
    served = asyncio.Event()

    async def on_link(link) -> None:
        links.append(link)
        served.set()
        await link.wait_closed()

    async with Balancer([a.websocket_port or 0, b.websocket_port or 0]) as balancer:
        uplink = websocket_agent(balancer.port, name, credentials, on_link)
        task = asyncio.get_running_loop().create_task(uplink.run())
        try:
            await asyncio.wait_for(served.wait(), DEADLINE)
            assert a.ownership is not None and a.ownership.holds(name)  # round robin: A first
            served.clear()
            loop = asyncio.get_running_loop()
            stopped_at = loop.time()
            await hubs.stop(a)
            await asyncio.wait_for(served.wait(), 8.0)
            took = loop.time() - stopped_at
            first = links[0].close_event
            assert first.code is CloseCode.GOING_AWAY and 0 <= first.retry_after < 1.0
            assert took < 8.0
            assert b.ownership is not None
            await eventually(lambda: b.ownership.holds(name), f"replica B serving {name}")
        finally:
            await uplink.close()
            await asyncio.wait_for(task, 5.0)


# -- nodes another replica serves ---------------------------------------------------------------


def _ready(node: dict) -> str:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") or ""
    return ""


@on_both_apis
@pytest.mark.parametrize("how", ["deleted", "expired"])
async def test_a_node_served_elsewhere_is_rechecked_only_when_its_replica_dies(
    hubs: Hubs,
    kube: KubeClient,
    namespace: str,
    node_name: str,
    proxy: FaultyProxy,
    how: str,
) -> None:
    # Replica A's reads of this node's Lease, counted by a proxy in front of the API (the
    # shared reference API holds other tests' edge Nodes, which A looks at too).
    def lease_reads() -> int:
        return proxy.count("GET", f"/namespaces/{namespace}/leases/{node_name}")

    replica_x = replica_lease("replica-x", 2)
    await kube.create(LEASES, replica_x, namespace)
    node_lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node_name, "annotations": {OWNER_ANNOTATION: "replica-x"}},
        "spec": {"holderIdentity": node_name, "leaseDurationSeconds": 40},
    }
    await kube.create(LEASES, node_lease, namespace)
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": {EDGE_ROLE_LABEL: ""}},
    }
    await kube.create(NODES, node)
    renewals = 0
    alive = True

    async def replica_x_serving() -> None:
        # replica-x renews its own Lease and the node's, at its pace (2 s / 0.4 s here).
        nonlocal renewals
        while alive:
            now = micro_time(time.time())
            await kube.patch(
                LEASES, replica_x["metadata"]["name"], {"spec": {"renewTime": now}}, namespace
            )
            await kube.patch(LEASES, node_name, {"spec": {"renewTime": now}}, namespace)
            renewals += 1
            await asyncio.sleep(0.4)

    x = asyncio.get_running_loop().create_task(replica_x_serving())
    try:
        await eventually(lambda: renewals >= 1, "replica-x serving")
        # A sees the Node without a session: after the 1.5 s grace it reads the Lease once.
        await hubs.start(
            ha_settings(namespace, "replica-a", **{"kube.kubeconfig": str(proxy.kubeconfig)})
        )
        await eventually(lambda: lease_reads() >= 1, "replica A's look at the node's Lease")
        reads = lease_reads()
        seen = renewals
        # Three grace periods of replica-x renewing: A reads nothing more (it used to read
        # the Lease once per grace).
        await eventually(lambda: renewals >= seen + 12, "replica-x renewing for 4.8 s")
        assert lease_reads() == reads
        assert _ready(await kube.get(NODES, node_name)) != "Unknown"
    finally:
        alive = False
        await x
    if how == "deleted":  # an orderly stop (it released its nodes' Leases by deleting its own)
        await kube.delete(LEASES, replica_x["metadata"]["name"], namespace)

    async def unknown() -> bool:
        return _ready(await kube.get(NODES, node_name)) == "Unknown"

    # Nobody renews the node's Lease any more: A looks again once replica-x is dead and
    # marks the node Unknown after the grace.
    await eventually(unknown, f"Node {node_name} Ready=Unknown")
    assert lease_reads() > reads
    await kube.delete(NODES, node_name)  # the reference API is shared
