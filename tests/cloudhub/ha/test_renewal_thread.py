"""The replica Lease renewed on a thread of its own (cloudhub/ha/keeper.py), against the
embedded API (on a thread of its own here, so that blocking the test's loop does not
block the API) and the reference kube-apiserver: a serving loop that is late keeps its
Lease and its sessions; one that is hung for ``ha.loop_stall_max`` stops renewing, and
the replica fences itself as one cut off from the API does.

The ``time.sleep`` calls are the fault itself (the serving loop blocked, as a burst of
handshakes blocks it), not waits for a condition."""

from __future__ import annotations

import logging
import pathlib
import time

import pytest

from cloudhub.ha import replica_lease_name
from cloudhub.kube import LEASES, KubeClient
from tests.cloudhub.ha.conftest import REPLICA_LEASE_S, ha_settings
from tests.cloudhub.hub.conftest import (  # noqa: F401  (fixtures)
    DEADLINE,
    EMBEDDED,
    KUBE_APISERVER,
    Cluster,
    Hubs,
    eventually,
    threaded_cluster,
)

BLOCKED_S = 2 * REPLICA_LEASE_S
"""How long the serving loop is blocked: longer than the replica Lease itself."""


def _block_the_loop() -> None:
    """The fault: this thread, the serving loop's, busy for BLOCKED_S."""
    time.sleep(BLOCKED_S)


@pytest.fixture(params=[EMBEDDED, pytest.param(KUBE_APISERVER, marks=pytest.mark.kubeapiserver)])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    if request.param == KUBE_APISERVER:
        server = request.getfixturevalue("kube_apiserver")
        return Cluster(KUBE_APISERVER, pathlib.Path(server.kubeconfig))
    api, _thread = request.getfixturevalue("threaded_cluster")
    return api


async def _version(kube: KubeClient, namespace: str, identity: str) -> str:
    lease = await kube.get(LEASES, replica_lease_name(identity), namespace)
    return lease["metadata"]["resourceVersion"]


async def test_a_late_serving_loop_keeps_the_replica_lease_and_its_sessions(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, caplog
) -> None:
    caplog.set_level(logging.INFO)
    hub = await hubs.start(ha_settings(namespace, "replica-a"))
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    assert hub.replicas is not None
    before = await _version(kube, namespace, "replica-a")
    _block_the_loop()
    # Nothing on this loop has run since: only the renewal thread can have renewed.
    assert hub.replicas.valid(), "the Lease was not renewed while the serving loop was late"
    await eventually(
        lambda: _changed(kube, namespace, before), "the replica Lease renewed afterwards"
    )
    assert hub.replicas.valid()
    assert agent.closes == [] and agent.sessions == 1, agent.closes
    messages = [r.getMessage() for r in caplog.records if r.name == "cloudhub.ha.replicas"]
    assert not any(m.startswith("fenced:") for m in messages), messages


async def _changed(kube: KubeClient, namespace: str, before: str) -> bool:
    return await _version(kube, namespace, "replica-a") != before


async def test_a_hung_serving_loop_stops_the_renewals_and_fences_the_replica(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str, caplog
) -> None:
    caplog.set_level(logging.INFO)
    hub = await hubs.start(ha_settings(namespace, "replica-a", **{"ha.loop_stall_max": 1.0}))
    agent = hubs.agent(node_name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    assert hub.replicas is not None
    _block_the_loop()
    assert not hub.replicas.valid(), "a loop hung past ha.loop_stall_max kept its Lease"
    await agent.wait_for(lambda: agent.closes, DEADLINE)
    assert "could not renew its Lease" in agent.closes[0].reason
    messages = [r.getMessage() for r in caplog.records if r.name == "cloudhub.ha.replicas"]
    assert any("has not run for" in m and "ha.loop_stall_max" in m for m in messages), messages

    async def valid_again() -> bool:
        return hub.replicas is not None and hub.replicas.valid()

    await eventually(valid_again, "renewals again once the loop runs")
    await agent.wait_for(lambda: agent.sessions >= 2 and agent.synced, DEADLINE)
