"""Fixtures for hub HA tests: the hub tests' API (embedded or the reference
kube-apiserver), hubs and simulated agents, and HA settings per replica."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from cloudhub.ha import REPLICA_LABEL, replica_lease_name
from edgeagent.uplink.dialer import WEBSOCKET, Uplink, UplinkSettings
from protocol.messages import PROTOCOL_VERSION, Hello
from tests.cloudhub.hub.conftest import (  # noqa: F401  (fixtures)
    BOTH,
    DEADLINE,
    Cluster,
    cluster,
    eventually,
    hubs,
    kube,
    kube_apiserver,
    namespace,
    unique,
)
from tests.cloudhub.kube.proxy import FaultyProxy
from tests.sim.agent import default_node_info

#: Replica Leases for tests: 3 s long, renewed every 0.5 s (production: 6 s and 2 s).
REPLICA_LEASE_S = 3


def ha_settings(where: str, identity: str, **more: Any) -> dict[str, Any]:
    """Hub overrides for one HA replica named ``identity``, its Leases in namespace ``where``
    (node Leases in a namespace of the test's own too, so that nodes never collide with
    another test's on the shared reference API)."""
    return {
        "ha.enabled": True,
        "ha.namespace": where,
        "ha.identity": identity,
        "ha.replica_lease_duration": REPLICA_LEASE_S,
        "ha.replica_renew_interval": 0.5,
        "nodes.lease_namespace": where,
        **more,
    }


def replica_lease(identity: str, seconds: int, **spec: Any) -> dict[str, Any]:
    """The replica Lease of another replica ``identity`` (one no hub of the test runs),
    ``seconds`` long; ``spec`` adds fields (``renewTime``, ``acquireTime``)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": replica_lease_name(identity), "labels": {REPLICA_LABEL: "true"}},
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": seconds, **spec},
    }


def websocket_agent(
    port: int, name: str, credentials: Any, on_link: Callable[[Any], Awaitable[None]]
) -> Uplink:
    """A real agent's dialer for node ``name``, WebSocket only, to ``127.0.0.1:port``,
    with a 30 s back-off of its own (so that a redial within seconds is the hub's
    ``retry_after``, never its back-off); ``on_link`` is called with each served link."""
    settings = UplinkSettings(
        host="127.0.0.1",
        websocket_port=port,
        server_name="localhost",
        transports=(WEBSOCKET,),
        backoff_base=30.0,
        backoff_cap=30.0,
    )
    return Uplink(
        settings,
        credentials=lambda: credentials,
        make_hello=lambda: Hello(
            min_version=PROTOCOL_VERSION,
            max_version=PROTOCOL_VERSION,
            node_name=name,
            agent_version="test",
            node_info=default_node_info(name),
        ),
        pending=list,
        next_seq=lambda: 1,
        on_link=on_link,
    )


@pytest.fixture
def node_name() -> str:
    """A node name unique across the session (the reference API is shared)."""
    return f"edge-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def proxy(cluster: Cluster, tmp_path: pathlib.Path) -> AsyncIterator[FaultyProxy]:  # noqa: F811
    """A fault-injecting proxy in front of the test's API."""
    async with FaultyProxy(pathlib.Path(cluster.kubeconfig), tmp_path) as p:
        yield p
