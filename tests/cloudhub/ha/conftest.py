"""Fixtures for hub HA tests: the hub tests' API (embedded or the reference
kube-apiserver), hubs and simulated agents, and HA settings per replica."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

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


@pytest.fixture
def node_name() -> str:
    """A node name unique across the session (the reference API is shared)."""
    return f"edge-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def proxy(cluster: Cluster, tmp_path: pathlib.Path) -> AsyncIterator[FaultyProxy]:  # noqa: F811
    """A fault-injecting proxy in front of the test's API."""
    async with FaultyProxy(pathlib.Path(cluster.kubeconfig), tmp_path) as p:
        yield p
