"""Node ownership across hub replicas (issue 18 item 1), against the embedded API and the
reference kube-apiserver: one owner per node, recorded on its Lease; a second agent with the
same certificate at another replica is turned away (no split-brain); an orderly stop hands
the nodes over at once; a Lease edited by hand makes the owner stop serving the node; a
replica whose API access is cut stops serving before the others take its nodes over."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from cloudhub.errors import ConfigError, KubeNotFound
from cloudhub.ha import OWNER_ANNOTATION, owner_of, replica_lease_name
from cloudhub.kube import LEASES, NODES, PODS, KubeClient, micro_time
from protocol.errors import CloseCode
from protocol.transport.errors import SessionRejected
from tests.cloudhub.ha.conftest import REPLICA_LEASE_S, ha_settings, replica_lease
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually, pod
from tests.cloudhub.kube.proxy import FaultyProxy

pytestmark = pytest.mark.parametrize("cluster", BOTH, indirect=True)


async def _owner(kube: KubeClient, namespace: str, node: str) -> str | None:
    try:
        return owner_of(await kube.get(LEASES, node, namespace))
    except KubeNotFound:
        return None


def _ready(node: dict) -> str:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") or ""
    return ""


async def test_a_second_agent_with_the_same_identity_at_another_replica_is_turned_away(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, caplog
) -> None:
    caplog.set_level(logging.WARNING)
    await hubs.start(ha_settings(namespace, "replica-a"))
    first = hubs.agent(node_name)
    await first.wait_for(lambda: first.synced, DEADLINE)
    assert await _owner(kube, namespace, node_name) == "replica-a"

    await hubs.start(ha_settings(namespace, "replica-b"))
    second = hubs.agent(node_name)  # same certificate, dialing replica B

    async def refused_twice() -> bool:
        return len(second.refusals) >= 2

    await eventually(refused_twice, "two refusals of the second agent")
    assert not second.connected and second.sessions == 0
    assert any("served by hub replica replica-a" in r for r in second.refusals), second.refusals
    # No split-brain: A still serves the node and still owns it.
    assert first.connected and first.sessions == 1
    assert await _owner(kube, namespace, node_name) == "replica-a"
    assert any(
        "turned a session away" in r.getMessage() and "replica-a" in r.getMessage()
        for r in caplog.records
    )


async def test_an_orderly_stop_hands_the_nodes_over_without_waiting_for_expiry(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str
) -> None:
    a = await hubs.start(ha_settings(namespace, "replica-a"))
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    async def ready() -> bool:
        try:
            return _ready(await kube.get(NODES, node_name)) == "True"
        except KubeNotFound:
            return False

    await eventually(ready, f"Node {node_name} Ready")
    b = await hubs.start(ha_settings(namespace, "replica-b"))
    agent.websocket_port = b.websocket_port or 0  # the Service now routes to B only
    await hubs.stop(a)  # a rolling update's SIGTERM
    with pytest.raises(KubeNotFound):  # released: one delete, not an expiry
        await kube.get(LEASES, replica_lease_name("replica-a"), namespace)
    await agent.wait_for(lambda: agent.synced and agent.sessions == 2, DEADLINE)
    assert await _owner(kube, namespace, node_name) == "replica-b"
    # The first close was A's GOING_AWAY; B served the node at its first attempt.
    assert [c.code for c in agent.closes][:1] == [CloseCode.GOING_AWAY]
    assert not agent.refusals, agent.refusals
    assert _ready(await kube.get(NODES, node_name)) == "True"


async def test_a_lease_edited_by_hand_makes_the_owner_stop_serving_the_node(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, caplog
) -> None:
    caplog.set_level(logging.INFO)
    await hubs.start(ha_settings(namespace, "replica-a"))
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await kube.patch(
        LEASES, node_name, {"metadata": {"annotations": {OWNER_ANNOTATION: "replica-x"}}}, namespace
    )
    # A's next renewal conflicts, it reads the Lease, sees another owner and closes.
    await agent.wait_for(lambda: agent.sessions >= 2 and agent.synced, DEADLINE)
    first_close = agent.closes[0]
    assert first_close.code is CloseCode.GOING_AWAY
    assert "no longer owns the node" in first_close.reason
    assert "replica-x" in first_close.reason
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"stopping serving node {node_name}" in m for m in messages), messages
    # replica-x has no replica Lease: A may take the node back when the agent returns.
    assert any(f"took node {node_name} over from hub replica replica-x" in m for m in messages)
    assert await _owner(kube, namespace, node_name) == "replica-a"


async def test_a_replica_whose_api_access_is_cut_stops_serving_before_others_take_over(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, proxy: FaultyProxy, caplog
) -> None:
    caplog.set_level(logging.WARNING)
    overrides = ha_settings(namespace, "replica-a", **{"kube.kubeconfig": str(proxy.kubeconfig)})
    a = await hubs.start(overrides)
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    b = await hubs.start(ha_settings(namespace, "replica-b"))
    agent.websocket_port = b.websocket_port or 0
    assert a.replicas is not None and a.ownership is not None
    proxy.fail("PATCH", "/leases/", 503, times=10**6)  # no renewal gets through any more
    proxy.fail("DELETE", "/leases/", 503, times=10**6)
    await agent.wait_for(lambda: agent.sessions >= 2 and agent.synced, DEADLINE + REPLICA_LEASE_S)
    assert agent.closes[0].code is CloseCode.GOING_AWAY
    assert "could not renew its Lease" in agent.closes[0].reason
    assert not a.replicas.valid() and len(a.ownership) == 0
    # B waited for A's Lease to expire (refusing meanwhile), then took the node over.
    assert any("served by hub replica replica-a" in r for r in agent.refusals), agent.refusals
    assert await _owner(kube, namespace, node_name) == "replica-b"
    proxy.clear_faults()  # the API is back: A renews its Lease and may serve nodes again

    async def valid_again() -> bool:
        return a.replicas is not None and a.replicas.valid()

    await eventually(valid_again, "replica A valid again")
    assert await _owner(kube, namespace, node_name) == "replica-b"  # nothing taken back
    # the operator reads both edges: fenced, and serving again
    messages = [r.getMessage() for r in caplog.records if r.name == "cloudhub.ha.replicas"]
    assert any(m.startswith("fenced:") for m in messages), messages
    assert "this replica's Lease is renewed again: serving nodes again" in messages, messages


async def test_a_pod_report_queued_for_a_node_the_replica_lost_is_not_written(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, proxy: FaultyProxy
) -> None:
    overrides = ha_settings(
        namespace,
        "replica-a",
        **{"kube.kubeconfig": str(proxy.kubeconfig), "status.retry_cap": 0.3},
    )
    a = await hubs.start(overrides)
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    proxy.fail("PUT", "/status", 503, times=10**6)  # the report waits in the writer, retrying
    await kube.create(PODS, pod("app", namespace, node_name), namespace)

    def dropped() -> float:
        return a.metrics.status_writes.labels("dropped")._value.get()

    def retried() -> float:
        return a.metrics.status_writes.labels("retried")._value.get()

    async def retrying() -> bool:
        return retried() >= 1

    await eventually(retrying, "the pod's status write retrying")
    before = dropped()
    # A live replica-x (its own Lease, 30 s long) now owns the node: A must stop writing
    # for it, and cannot take it back while replica-x lives.
    other = replica_lease("replica-x", 30)
    await kube.create(LEASES, other, namespace)
    await kube.patch(
        LEASES, node_name, {"metadata": {"annotations": {OWNER_ANNOTATION: "replica-x"}}}, namespace
    )

    async def was_dropped() -> bool:
        return dropped() > before

    await eventually(was_dropped, "the queued report dropped once the node was lost")
    assert ((await kube.get(PODS, "app", namespace)).get("status") or {}).get("phase") != "Running"
    proxy.clear_faults()
    await kube.delete(LEASES, replica_lease_name("replica-x"), namespace)  # replica-x stops
    # The agent resends the unacknowledged report to its next session (A again, which takes
    # the node back from the replica-x that is gone): written, Running.

    async def running() -> bool:
        return ((await kube.get(PODS, "app", namespace)).get("status") or {}).get(
            "phase"
        ) == "Running"

    await eventually(running, "the pod Running")
    assert await _owner(kube, namespace, node_name) == "replica-a"


class _HeldBucket:
    """A rate limiter that holds every write until ``go`` is set (a long queue for it)."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()

    async def acquire(self) -> None:
        self.waiting.set()
        await self.go.wait()


async def test_a_pod_report_waiting_for_the_rate_limit_when_the_node_is_lost_is_dropped(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, proxy: FaultyProxy
) -> None:
    """Ownership was checked before the pod writer's rate-limit wait only: a replica that
    lost the node during the wait still wrote the pod's status after the new owner took
    over (two replicas writing one node's pods)."""
    a = await hubs.start(
        ha_settings(namespace, "replica-a", **{"kube.kubeconfig": str(proxy.kubeconfig)})
    )
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    held = _HeldBucket()
    a.pod_writer.bucket = held  # type: ignore[assignment]
    await kube.create(PODS, pod("app", namespace, node_name), namespace)
    await asyncio.wait_for(held.waiting.wait(), DEADLINE)
    await kube.create(LEASES, replica_lease("replica-x", 30), namespace)
    await kube.patch(
        LEASES, node_name, {"metadata": {"annotations": {OWNER_ANNOTATION: "replica-x"}}}, namespace
    )
    assert a.ownership is not None
    await eventually(lambda: not a.ownership.holds(node_name), "replica-a lost the node")

    def dropped() -> float:
        return a.metrics.status_writes.labels("dropped")._value.get()

    before = dropped()
    held.go.set()
    await eventually(lambda: dropped() > before, "the waiting report dropped")
    assert proxy.count("PUT", "/pods/app/status") == 0
    assert ((await kube.get(PODS, "app", namespace)).get("status") or {}).get("phase") != "Running"


async def test_a_heartbeat_retrying_when_the_node_is_lost_is_not_written(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, proxy: FaultyProxy
) -> None:
    """A Ready heartbeat retrying through API errors when another replica takes the node
    over: ownership was checked once, before the rate limit's wait and the retries, so the
    old owner could still write Ready after losing the node; each attempt is fenced now."""
    a = await hubs.start(
        ha_settings(namespace, "replica-a", **{"kube.kubeconfig": str(proxy.kubeconfig)})
    )
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    status = f"/nodes/{node_name}/status"
    proxy.fail("PUT", status, 503, times=10**6)  # heartbeats retry with back-off

    async def retrying() -> bool:
        return proxy.count("PUT", status) >= 1

    await eventually(retrying, "a heartbeat retrying")
    other = replica_lease("replica-x", 30)
    await kube.create(LEASES, other, namespace)
    await kube.patch(
        LEASES, node_name, {"metadata": {"annotations": {OWNER_ANNOTATION: "replica-x"}}}, namespace
    )
    assert a.ownership is not None
    await eventually(lambda: not a.ownership.holds(node_name), "replica-a lost the node")
    tried = proxy.count("PUT", status)
    proxy.clear_faults()

    def fenced() -> float:
        return a.metrics.node_writes.labels("heartbeat", "fenced")._value.get()

    await eventually(lambda: fenced() >= 1, "the retrying heartbeat ended unwritten")
    assert proxy.count("PUT", status) == tried, "a heartbeat was sent after the node was lost"


@pytest.mark.parametrize("restarted", [True, False])
async def test_a_node_named_by_a_replica_that_restarted_since_is_free(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, restarted: bool
) -> None:
    now = time.time()
    replica_x = replica_lease(
        "replica-x", 30, acquireTime=micro_time(now), renewTime=micro_time(now)
    )
    await kube.create(LEASES, replica_x, namespace)
    # replica-x's previous incarnation renewed the node before it restarted (or, in the
    # other case, its current one renewed it after starting: it serves the node).
    renewed = now - 5 if restarted else now + 1
    node_lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node_name, "annotations": {OWNER_ANNOTATION: "replica-x"}},
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": 40,
            "renewTime": micro_time(renewed),
        },
    }
    await kube.create(LEASES, node_lease, namespace)
    await hubs.start(ha_settings(namespace, "replica-b"))
    agent = hubs.agent(node_name)
    if restarted:
        await agent.wait_for(lambda: agent.synced, DEADLINE)
        assert not agent.refusals
        assert await _owner(kube, namespace, node_name) == "replica-b"
        return

    async def refused() -> bool:
        return bool(agent.refusals)

    await eventually(refused, "a refusal")
    assert "served by hub replica replica-x" in agent.refusals[0]
    assert not agent.connected
    assert await _owner(kube, namespace, node_name) == "replica-x"


async def test_a_missing_ha_namespace_stops_the_start_with_its_name(hubs: Hubs) -> None:
    with pytest.raises(ConfigError, match=r"ha\.namespace 'no-such-ns' does not exist"):
        await hubs.start(ha_settings("no-such-ns", "replica-a"))


async def test_an_api_failure_during_the_claim_turns_the_session_away_as_overloaded(
    hubs: Hubs, namespace: str, node_name: str, proxy: FaultyProxy
) -> None:
    overrides = ha_settings(namespace, "replica-a", **{"kube.kubeconfig": str(proxy.kubeconfig)})
    await hubs.start(overrides)
    proxy.fail("GET", f"/leases/{node_name}", 503, times=1)  # the claim's read
    agent = hubs.agent(node_name, start=False)
    with pytest.raises(SessionRejected) as refused:
        await agent.dial()
    assert refused.value.code is CloseCode.OVERLOADED
    assert "cannot record this node's owner" in refused.value.reason
    # full jitter over one replica renewal interval (the agent takes it as its delay)
    assert refused.value.retry_after is not None and 0 <= refused.value.retry_after <= 0.5
    agent.start()  # the API answers again: served
    await agent.wait_for(lambda: agent.synced, DEADLINE)


async def test_a_release_the_api_fails_is_retried_until_the_node_is_free(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, proxy: FaultyProxy, caplog
) -> None:
    """A release lost to a 503 left the node held with no session, so every other replica
    turned its agent away until this replica stopped (~730 such releases per replica in
    the 10,000-node ramp); it is retried with back-off."""
    overrides = ha_settings(namespace, "replica-a", **{"kube.kubeconfig": str(proxy.kubeconfig)})
    a = await hubs.start(overrides)
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    assert await _owner(kube, namespace, node_name) == "replica-a"
    proxy.fail("PATCH", f"/leases/{node_name}", 503, times=2)
    await agent.stop()
    assert a.ownership is not None
    await eventually(lambda: not a.ownership.holds(node_name), "the session ended")

    async def free() -> bool:
        return await _owner(kube, namespace, node_name) == ""

    await eventually(free, f"node {node_name}'s Lease released after two 503s")
    retried = [r.getMessage() for r in caplog.records if "releasing node" in r.getMessage()]
    assert retried and all("503" in line for line in retried), retried


async def test_a_release_racing_a_renewal_in_flight_still_frees_the_node(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, proxy: FaultyProxy
) -> None:
    """The session ended while a renewal's PATCH was in flight: the renewal landed after
    the release took its version, so the release's PATCH conflicted and the node stayed
    named by this replica with no session (seen when an agent left within a millisecond of
    its claim)."""
    overrides = ha_settings(namespace, "replica-a", **{"kube.kubeconfig": str(proxy.kubeconfig)})
    a = await hubs.start(overrides)
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    ownership = a.ownership
    assert ownership is not None
    clears = []

    async def session_ends() -> None:  # after the renewal landed, before its answer
        clears.append(ownership.release(node_name))

    proxy.after_once("PATCH", f"/leases/{node_name}", session_ends)
    assert await ownership.renew(node_name) is False  # released while in flight
    assert clears and clears[0] is not None
    await clears[0]
    assert await _owner(kube, namespace, node_name) == ""


async def test_a_hand_edit_that_keeps_the_owner_does_not_interrupt_the_node(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str
) -> None:
    a = await hubs.start(ha_settings(namespace, "replica-a"))
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    edited = await kube.patch(
        LEASES, node_name, {"metadata": {"labels": {"team": "ops"}}}, namespace
    )
    edited_at = edited["spec"]["renewTime"]

    async def renewed_after_the_edit() -> bool:
        lease = await kube.get(LEASES, node_name, namespace)
        return lease["spec"]["renewTime"] > edited_at and owner_of(lease) == "replica-a"

    # The renewal after the edit conflicts, finds the owner unchanged and retries on the
    # new version: the session stays, the label stays.
    await eventually(renewed_after_the_edit, "a renewal after the edit")
    lease = await kube.get(LEASES, node_name, namespace)
    assert lease["metadata"]["labels"]["team"] == "ops"
    assert agent.connected and agent.sessions == 1 and not agent.closes
    assert a.ownership is not None and a.ownership.holds(node_name)
