"""A misbehaving Kubernetes API loses nothing: the hub retries, the edge keeps what is not
yet durable. The hub talks to the API through a fault-injecting proxy."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from cloudhub.errors import KubeNotFound
from cloudhub.kube import LEASES, NODES, PODS, KubeClient, parse_time
from protocol.errors import CloseCode
from tests.cloudhub.hub.conftest import DEADLINE, Cluster, Hubs, eventually, pod
from tests.cloudhub.kube.proxy import FaultyProxy
from tests.sim.agent import default_node_info


def uid(obj: dict) -> str:
    return obj["metadata"]["uid"]


@pytest.fixture
async def proxy(cluster: Cluster, tmp_path: pathlib.Path) -> AsyncIterator[FaultyProxy]:
    async with FaultyProxy(cluster.kubeconfig, tmp_path) as p:
        yield p


@pytest.fixture
async def faulty_hubs(proxy: FaultyProxy, pki_ca) -> AsyncIterator[Hubs]:
    """Hubs whose API access goes through the proxy."""
    hubs = Hubs(Cluster("proxied", proxy.kubeconfig), pki_ca)
    try:
        yield hubs
    finally:
        await hubs.close()


async def test_status_writes_survive_server_errors_and_conflicts(
    faulty_hubs: Hubs, proxy: FaultyProxy, kube: KubeClient, namespace: str, unique
) -> None:
    hub = await faulty_hubs.start()
    node = unique("edge-5xx")
    agent = faulty_hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    # The API answers the status write with 503, 500, then a 409 (someone else wrote)
    proxy.fail("PUT", "/status", 503)
    proxy.fail("PUT", "/status", 500)
    proxy.fail("PUT", "/status", 409)
    created = await kube.create(PODS, pod("web", namespace, node))
    await agent.wait_for(lambda: uid(created) in agent.store and bool(agent.unacked), DEADLINE)

    async def running() -> bool:
        return ((await kube.get(PODS, "web", namespace)).get("status") or {}).get(
            "phase"
        ) == "Running"

    await eventually(running, "the status written after the API recovered")
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    assert proxy.count("PUT", "/pods/web/status") == 4  # 503, 500, 409, then written
    assert proxy.count("GET", "/pods/web") >= 1  # the fresh read after the conflict
    retried = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_pod_status_writes_total", {"result": "retried"}
    )
    assert retried == 2
    errors = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_api_request_errors_total",
        {"verb": "update", "resource": "pods", "code": "503"},
    )
    assert errors == 1


async def test_an_unacked_status_waits_for_the_api(
    faulty_hubs: Hubs, proxy: FaultyProxy, kube: KubeClient, namespace: str, unique
) -> None:
    """While the API fails, the message is not acknowledged; once it works, it is."""
    await faulty_hubs.start({"status.retry_cap": 0.2})
    node = unique("edge-outage")
    agent = faulty_hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    proxy.fail("PUT", "/status", 503, times=1000)
    created = await kube.create(PODS, pod("web", namespace, node))
    await agent.wait_for(lambda: uid(created) in agent.store and bool(agent.unacked), DEADLINE)
    await eventually(
        _async(lambda: proxy.count("PUT", "/pods/web/status") >= 5), "several failed writes"
    )
    assert agent.unacked  # nothing durable, nothing acknowledged
    proxy.clear_faults()  # the outage ends
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    status = (await kube.get(PODS, "web", namespace))["status"]
    assert status["phase"] == "Running"


async def test_lease_renewal_resumes_after_api_errors(
    faulty_hubs: Hubs, proxy: FaultyProxy, kube: KubeClient, unique
) -> None:
    await faulty_hubs.start()
    node = unique("edge-lease-5xx")
    agent = faulty_hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    async def lease_renewed_after(t: float) -> bool:
        try:
            lease = await kube.get(LEASES, node, "kube-node-lease")
        except Exception:
            return False
        return parse_time(lease["spec"]["renewTime"]) > t

    await eventually(lambda: lease_renewed_after(0.0), "the first Lease")
    proxy.fail("PATCH", "/leases/", 503, times=3)
    failed_from = (await kube.get(LEASES, node, "kube-node-lease"))["spec"]["renewTime"]
    await eventually(
        _async(lambda: proxy.count("PATCH", f"/leases/{node}") >= 4), "renewals through errors"
    )
    await eventually(lambda: lease_renewed_after(parse_time(failed_from)), "a renewal again")


def _async(check):
    async def wrapped() -> bool:
        return check()

    return wrapped


async def test_node_update_conflicts_past_the_retries_are_retried_not_unauthorized(
    faulty_hubs: Hubs, proxy: FaultyProxy, kube: KubeClient, unique
) -> None:
    """Other writers of a Node (a second session of the node, the node controller, a user
    labelling it) can make every read-modify-write in a row conflict: that is a busy API,
    not a node the hub must refuse (UNAUTHORIZED makes the agent stop and ask for a
    re-join)."""
    await faulty_hubs.start()
    node = unique("edge-conflicts")
    first = faulty_hubs.agent(node)
    await eventually(lambda: _node_label(kube, node, "sim"), "the Node registered")
    await first.stop()
    info = default_node_info(node)
    info["labels"] = {"edgefleet.io/site": "moved"}  # new facts: the Node must be updated
    proxy.fail("PUT", f"/nodes/{node}", 409, times=10)  # more than one update's attempts
    again = faulty_hubs.agent(node, node_info=info)
    await eventually(lambda: _node_label(kube, node, "moved"), "the Node updated after all")
    assert again.connected and again.sessions == 1, again.closes
    assert not [c for c in again.closes if c.code is CloseCode.UNAUTHORIZED]


async def _node_label(kube: KubeClient, node: str, site: str) -> bool:
    try:
        got = await kube.get(NODES, node)
    except KubeNotFound:
        return False
    return (got["metadata"].get("labels") or {}).get("edgefleet.io/site") == site
