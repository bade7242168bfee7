"""The replica Lease renews on an API client of its own (issue 18, fencing under load): a
replica whose shared API connections are all busy (a burst of node claims and writes
holds them: 3,333 claims at a replica's start at 10,000 nodes) still renews its Lease in
time, so it is not fenced while the API answers. As kube-controller-manager's leader
election uses a client of its own."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cloudhub.ha import replica_lease_name
from cloudhub.kube import CONFIGMAPS, LEASES, NAMESPACES
from tests.cloudhub.ha.conftest import REPLICA_LEASE_S, ha_settings
from tests.cloudhub.hub.conftest import BOTH, Hubs, eventually

pytestmark = pytest.mark.parametrize("cluster", BOTH, indirect=True)

SHARED_CONNECTIONS = 64
"""KubeClient's connection pool (``max_connections``) the hub's shared client has."""


async def _hold(watch) -> None:
    with contextlib.suppress(Exception):
        async for _ in watch:
            pass


async def test_the_replica_lease_renews_while_every_shared_connection_is_busy(
    hubs: Hubs, kube, namespace: str
) -> None:
    hub = await hubs.start(ha_settings(namespace, "replica-busy"))
    fenced: list[str] = []
    assert hub.replicas is not None
    hub.replicas.on_fenced.append(fenced.append)
    assert hub.kube is not None
    # every connection of the hub's shared client held by a watch that sees nothing
    holders = [
        asyncio.create_task(
            _hold(
                hub.kube.watch(
                    CONFIGMAPS,
                    namespace,
                    label_selector=f"held={i}",
                    timeout_seconds=120,
                    allow_bookmarks=False,
                )
            )
        )
        for i in range(SHARED_CONNECTIONS)
    ]
    try:
        # the premise: a request on the shared client now waits for a connection
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(hub.kube.get(NAMESPACES, namespace), 2 * REPLICA_LEASE_S)
        renewals: list[str] = []

        async def renewed_three_times() -> bool:
            lease = await kube.get(LEASES, replica_lease_name("replica-busy"), namespace)
            stamp = lease["spec"]["renewTime"]
            if not renewals or renewals[-1] != stamp:
                renewals.append(stamp)
            return len(renewals) >= 4

        await eventually(renewed_three_times, "the replica Lease renewed 3 more times")
        assert hub.replicas.valid() and fenced == []
    finally:
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
