"""Fixtures for cloudhub.kube: a real API (embedded, or the real kube-apiserver), a client on
it, and a fault-injecting proxy in front of it."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import AsyncIterator

import pytest

from cloudhub.kube import CONFIGMAPS, NAMESPACES, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.cloudhub.kube.proxy import FaultyProxy
from tests.k8s.fixtures import kube_apiserver  # noqa: F401  (session fixture)

EMBEDDED = "embedded"
KUBE_APISERVER = "kube-apiserver"
BOTH = [EMBEDDED, pytest.param(KUBE_APISERVER, marks=pytest.mark.kubeapiserver)]

#: Changes the embedded API keeps for watches (a watch from before them gets 410 Gone).
EMBEDDED_HISTORY = 50


async def expired_version(kube: KubeClient, namespace: str, backend: str, rv: str) -> str:
    """A resourceVersion the API no longer serves watches from (410 Gone).

    Embedded: write more changes than its history holds after ``rv``, and return ``rv``.
    kube-apiserver: its watch cache keeps about the last 75 s of changes (and grows to
    hold them), so a few hundred writes do not expire ``rv``; but it starts at the
    revision it was created with, so ``"1"`` is always expired there.
    """
    if backend == KUBE_APISERVER:
        return "1"
    for i in range(EMBEDDED_HISTORY + 10):
        await kube.create(
            CONFIGMAPS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"expire-{i}", "namespace": namespace},
            },
        )
    return rv


@pytest.fixture(params=BOTH)
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, pathlib.Path]]:
    """(backend name, kubeconfig) of a running API."""
    if request.param == KUBE_APISERVER:
        server = request.getfixturevalue("kube_apiserver")
        yield KUBE_APISERVER, pathlib.Path(server.kubeconfig)
        return
    settings = APIServerSettings(
        data_dir=None, port=0, watch_history_events=EMBEDDED_HISTORY, bookmark_interval_s=0.3
    )
    async with EmbeddedAPIServer(settings) as api:
        yield EMBEDDED, api.kubeconfig_path


@pytest.fixture
async def kube(cluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_kubeconfig(str(cluster[1]))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def proxy(cluster, tmp_path: pathlib.Path) -> AsyncIterator[FaultyProxy]:
    async with FaultyProxy(cluster[1], tmp_path) as p:
        yield p


@pytest.fixture
async def proxied(proxy: FaultyProxy) -> AsyncIterator[KubeClient]:
    """A client that reaches the API through the proxy."""
    client = await KubeClient.from_kubeconfig(str(proxy.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def namespace(kube: KubeClient) -> str:
    name = f"k-{uuid.uuid4().hex[:8]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name
