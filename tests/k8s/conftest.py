"""Fixtures for tests/k8s: the reference kube-apiserver, a client for it, a fresh namespace."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from tests.k8s.fixtures import (  # noqa: F401  (re-exported fixtures)
    Backend,
    kube_apiserver,
    kube_apiserver_binaries,
    kubectl,
)
from tests.k8s.kube_apiserver import RunningAPIServer

# The API servers the kubectl tests run against: parameter id -> name of a session fixture
# whose value has a `kubeconfig` path. The embedded server joins by adding its fixture here.
KUBECTL_BACKENDS = {"kube-apiserver": "kube_apiserver"}


@pytest.fixture(scope="session", params=sorted(KUBECTL_BACKENDS))
def kubectl_backend(request: pytest.FixtureRequest) -> Backend:
    """Each API server in KUBECTL_BACKENDS in turn (the test runs once per backend)."""
    server = request.getfixturevalue(KUBECTL_BACKENDS[request.param])
    return Backend(name=request.param, kubeconfig=Path(server.kubeconfig))


@pytest.fixture
async def kube_client(kube_apiserver: RunningAPIServer) -> AsyncIterator[client.ApiClient]:  # noqa: F811
    """A kubernetes_asyncio ApiClient configured from the server's kubeconfig file."""
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(kube_apiserver.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture
async def namespace(kube_client: client.ApiClient) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted afterwards.

    With no controller-manager running, the namespace stays ``Terminating`` after the
    delete (the namespace controller that empties and finalizes it is not there); the
    server is thrown away at the end of the session anyway.
    """
    core = client.CoreV1Api(kube_client)
    name = f"edgefleet-test-{uuid.uuid4().hex[:8]}"
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        await core.delete_namespace(name)
