"""Races between a replica's writes of one Lease, on both APIs, through the fault proxy:
a request slow on the wire (``before_once``) or an answer held after the write landed
(``after_once``). Found in review (helper-47): each test fails without its fix.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cloudhub.errors import KubeAPIError, KubeNotFound
from cloudhub.ha import NodeOwnership, ReplicaLeases, owner_of
from cloudhub.ha.settings import HASettings
from cloudhub.kube import LEASES, KubeClient
from tests.cloudhub.hub.conftest import BOTH
from tests.cloudhub.kube.proxy import FaultyProxy

pytestmark = pytest.mark.parametrize("cluster", BOTH, indirect=True)

SLOW_WIRE_S = 2.0
"""How long a held request stays on the wire at most when nothing overtakes it (the
latency of a slow link, not a wait for a condition: with the fix nothing overtakes it)."""


def _settings(namespace: str, identity: str) -> HASettings:
    return HASettings(
        enabled=True,
        namespace=namespace,
        identity=identity,
        replica_lease_duration=60,
        replica_renew_interval=0.1,
    )


async def _lease(kube: KubeClient, namespace: str, name: str) -> dict | None:
    with contextlib.suppress(KubeNotFound):
        return await kube.get(LEASES, name, namespace)
    return None


@contextlib.asynccontextmanager
async def _client(proxy: FaultyProxy, **options: float):
    client = await KubeClient.from_kubeconfig(str(proxy.kubeconfig), **options)
    try:
        yield client
    finally:
        await client.close()


async def test_a_renewal_in_flight_at_release_does_not_create_the_deleted_lease_again(
    kube: KubeClient, namespace: str, proxy: FaultyProxy
) -> None:
    """A stopping replica deletes its Lease so that the others take its nodes at once. A
    renewal already on the wire could reach the API after the DELETE: its 404 made it
    create the Lease again, live-looking for a whole Lease, with nobody to delete it."""
    async with _client(proxy) as client:
        replicas = ReplicaLeases(client, _settings(namespace, "replica-a"), "replica-a")
        name = replicas.lease_name
        await replicas.start()
        held = asyncio.Event()
        deleted = asyncio.Event()

        async def slow_renewal() -> None:  # overtaken by a DELETE sent meanwhile, if any
            held.set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(deleted.wait(), SLOW_WIRE_S)

        async def delete_sent() -> None:
            deleted.set()

        proxy.before_once("PATCH", f"/leases/{name}", slow_renewal)
        proxy.before_once("DELETE", f"/leases/{name}", delete_sent)
        renewals = asyncio.ensure_future(replicas.run())
        try:
            await asyncio.wait_for(held.wait(), 30)
            await replicas.release()
            await asyncio.wait_for(renewals, 30)  # ends by itself once released
        finally:
            renewals.cancel()
            replicas.close()
        assert proxy.count("DELETE", f"/leases/{name}") == 1
        assert await _lease(kube, namespace, name) is None, "created again after the DELETE"


async def test_an_old_links_release_leaves_a_new_claim_in_flight_here_alone(
    kube: KubeClient, namespace: str, proxy: FaultyProxy, unique
) -> None:
    """Link A of a node ends while link B of it (the agent's reconnect) is being claimed at
    the same replica, B's PATCH landed and its answer not read yet. A's release conflicts
    with it; it must not take the annotation B just wrote for a stale one of its own."""
    node = unique("edge")
    async with _client(proxy) as client:
        replicas = ReplicaLeases(client, _settings(namespace, "replica-a"), "replica-a")
        await replicas.start()
        ownership = NodeOwnership(client, replicas, lease_namespace=namespace, lease_duration=40)
        assert (await ownership.claim(node)).granted  # link A
        releases: list[asyncio.Future] = []

        async def link_a_ends() -> None:  # B's claim landed; A's release runs to its end
            clear = ownership.release(node)
            assert clear is not None
            releases.append(asyncio.ensure_future(clear))
            await releases[0]

        proxy.after_once("PATCH", f"/leases/{node}", link_a_ends)
        try:
            assert (await ownership.claim(node)).granted  # link B
            assert releases and releases[0].done()
            assert ownership.holds(node)
            lease = await _lease(kube, namespace, node)
            assert owner_of(lease) == "replica-a", (lease or {}).get("metadata")
        finally:
            replicas.close()


async def test_a_claim_whose_answer_is_lost_gives_the_node_back(
    kube: KubeClient, namespace: str, proxy: FaultyProxy, unique
) -> None:
    """The claim's create landed but its answer did not come (the request timed out): the
    session is turned away and the node not held, yet its Lease named this replica, so
    every other replica turned the agent away as served here. ``disown`` clears it."""
    node = unique("edge")
    async with _client(proxy, request_timeout=0.5) as client:
        replicas = ReplicaLeases(client, _settings(namespace, "replica-a"), "replica-a")
        await replicas.start()
        ownership = NodeOwnership(client, replicas, lease_namespace=namespace, lease_duration=40)
        answered = asyncio.Event()

        async def answer_lost() -> None:  # written; the answer comes after the timeout
            await answered.wait()

        proxy.after_once("POST", f"/namespaces/{namespace}/leases", answer_lost)
        try:
            with pytest.raises(KubeAPIError, match="no answer within"):
                await ownership.claim(node)
            answered.set()
            assert owner_of(await _lease(kube, namespace, node)) == "replica-a"  # landed
            assert not ownership.holds(node)
            await ownership.disown(node)
            assert owner_of(await _lease(kube, namespace, node)) == ""
        finally:
            answered.set()
            replicas.close()


async def test_a_claim_whose_read_failed_is_not_disowned(
    namespace: str, proxy: FaultyProxy, unique
) -> None:
    """Only a failed *write* may have landed: a claim that failed at its read leaves
    nothing to give back, and costs no further request (an API outage would otherwise
    add a read-and-retry task for every agent turned away)."""
    node = unique("edge")
    async with _client(proxy) as client:
        replicas = ReplicaLeases(client, _settings(namespace, "replica-a"), "replica-a")
        await replicas.start()
        ownership = NodeOwnership(client, replicas, lease_namespace=namespace, lease_duration=40)
        proxy.fail("GET", f"/leases/{node}", 503)
        try:
            with pytest.raises(KubeAPIError, match="503"):
                await ownership.claim(node)
            assert ownership.disown(node) is None
        finally:
            replicas.close()
