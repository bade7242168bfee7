"""Fixtures for the hub's integration tests: a Kubernetes API, a hub on it, simulated agents.

``cluster`` is the embedded API server (in memory, on this test's event loop) by default;
tests marked with ``@pytest.mark.parametrize("cluster", BOTH, indirect=True)`` run against
the real kube-apiserver 1.20 as well (the session-wide server of tests/k8s/fixtures.py).

``make_hub(**overrides)`` starts a hub on the cluster with short intervals (dotted setting
keys as overrides, e.g. ``{"status.qps": 5}``); ``agent(name)`` makes a simulated agent
pointed at the last hub started. Everything started is stopped at the end of the test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from cloudhub.ha.keeper import LoopThread
from cloudhub.hub import Hub
from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.settings import load_hub_settings
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.k8s.fixtures import kube_apiserver, require  # noqa: F401  (session fixture)
from tests.k8s.kube_apiserver import kubectl_path
from tests.sim import SimAgent, node_credentials
from tests.testpki import TestPKI
from tests.waiting import eventually as eventually  # re-exported: the one polling helper

EMBEDDED = "embedded"
KUBE_APISERVER = "kube-apiserver"
BOTH = [EMBEDDED, pytest.param(KUBE_APISERVER, marks=pytest.mark.kubeapiserver)]

#: Generous deadline for conditions on a loaded 2-core machine (seconds).
DEADLINE = 30.0

#: Hub settings for tests: loopback, free ports, short intervals (seconds).
TEST_SETTINGS: dict[str, Any] = {
    "listen.quic_host": "127.0.0.1",
    "listen.quic_port": 0,
    "listen.websocket_host": "127.0.0.1",
    "listen.websocket_port": 0,
    "observability.http_host": "127.0.0.1",
    "observability.http_port": 0,
    "nodes.lease_interval": 0.5,
    "nodes.lease_duration": 2,
    "nodes.not_ready_grace": 1.5,
    "nodes.status_report_interval": 1.0,
    "session.heartbeat_interval": 2.0,
    "session.liveness_timeout": 10.0,
    "session.close_timeout": 1.0,
    "status.retry_cap": 0.5,
}


@dataclasses.dataclass
class Cluster:
    """A Kubernetes API for one test."""

    name: str
    kubeconfig: pathlib.Path


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """The embedded API server (default) or the real kube-apiserver (parameter)."""
    name = getattr(request, "param", EMBEDDED)
    if name == KUBE_APISERVER:
        server = request.getfixturevalue("kube_apiserver")
        yield Cluster(KUBE_APISERVER, pathlib.Path(server.kubeconfig))
        return
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as api:
        yield Cluster(EMBEDDED, api.kubeconfig_path)


class InThread(LoopThread):
    """Runs coroutines on an event loop of their own in a daemon thread, so that their
    timing does not depend on how busy the test's loop is (the storm test's API server
    and its watch)."""

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        """Run ``coro`` there and wait for its result (blocking: call before or after the
        test's own async work, or through :meth:`arun`)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def arun(self, coro: Any) -> Any:
        """Run ``coro`` there; await its result from the test's loop."""
        return await self.call(coro)


@pytest.fixture
def threaded_cluster() -> Iterator[tuple[Cluster, InThread]]:
    """The embedded API server on its own thread and loop (and that thread, to run more
    there): its timing is the API's, however busy the test's loop is."""
    thread = InThread("embedded-api")
    server = EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0))
    thread.run(server.__aenter__())
    try:
        yield Cluster(EMBEDDED, server.kubeconfig_path), thread
    finally:
        thread.run(server.__aexit__(None, None, None))
        thread.close()


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[KubeClient]:
    """A raw-JSON client for the test's own reads and writes."""
    client = await KubeClient.from_kubeconfig(str(cluster.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def namespace(kube: KubeClient) -> str:
    """A fresh namespace (left behind: the API is thrown away, or shared read-only)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names unique across the session (the real API server is shared by tests)."""
    suffix = uuid.uuid4().hex[:6]
    return lambda name: f"{name}-{suffix}"


class Hubs:
    """Starts hubs and agents for one test and stops them at its end."""

    def __init__(self, cluster: Cluster, pki_ca: TestPKI) -> None:
        self.cluster = cluster
        self.pki = pki_ca
        self.hubs: list[Hub] = []
        self.agents: list[SimAgent] = []
        self.hub: Hub | None = None

    async def start(self, overrides: dict[str, Any] | None = None, **kwargs: Any) -> Hub:
        values = {**TEST_SETTINGS, "kube.kubeconfig": str(self.cluster.kubeconfig)}
        values.update(overrides or {})
        settings = load_hub_settings(overrides=values)
        hub = Hub(settings, credentials=self.pki.server, **kwargs)
        self.hubs.append(hub)
        await hub.start()
        self.hub = hub
        return hub

    async def stop(self, hub: Hub) -> None:
        await hub.aclose()
        self.hubs.remove(hub)

    def agent(
        self, name: str, *, transport: str = "websocket", start: bool = True, **kwargs: Any
    ) -> SimAgent:
        assert self.hub is not None, "start a hub first"
        credentials = kwargs.pop("credentials", None) or node_credentials(self.pki.ca, name)
        agent = SimAgent(
            name,
            credentials,
            host="127.0.0.1",
            quic_port=self.hub.quic_port or 0,
            websocket_port=self.hub.websocket_port or 0,
            transport=transport,
            **kwargs,
        )
        self.agents.append(agent)
        if start:
            agent.start()
        return agent

    async def close(self) -> None:
        await asyncio.gather(*(agent.stop() for agent in self.agents))
        for hub in list(self.hubs):
            await hub.aclose()


@pytest.fixture
async def hubs(cluster: Cluster, pki_ca: TestPKI) -> AsyncIterator[Hubs]:
    h = Hubs(cluster, pki_ca)
    try:
        yield h
    finally:
        await h.close()


def pod(name: str, namespace: str, node: str, **spec: Any) -> dict:
    """A minimal pod bound to ``node``."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "busybox:1.36"}],
            **spec,
        },
    }
    return body


def configmap(name: str, namespace: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def secret(name: str, namespace: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": data,
    }


# -- kubectl against the test's cluster (EdgeUpgrade and EdgeImagePrePull tests) -----------

CRDS = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "crds"


def run(kubectl_bin: str, cluster: Cluster, *args: str, stdin: str | None = None):
    return subprocess.run(
        [kubectl_bin, f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def apply(kubectl_bin: str, cluster: Cluster, obj: dict):
    return run(kubectl_bin, cluster, "apply", "-f", "-", stdin=json.dumps(obj))


@pytest.fixture
def kubectl_bin() -> str:
    """Debian's kubectl 1.20.2 (scripts/setup.sh test unpacks it)."""
    path = kubectl_path()
    if path is None:
        require("kubectl", "scripts/setup.sh test unpacks Debian's kubernetes-client")
    return str(path)


@pytest.fixture
def crds(kubectl_bin: str, cluster: Cluster) -> None:
    for name in ("edgeupgrades", "edgeimageprepulls"):
        path = CRDS / f"{name}.apps.edgefleet.io.yaml"
        done = run(kubectl_bin, cluster, "apply", "-f", str(path))
        assert done.returncode == 0, done.stderr
        wait = run(kubectl_bin, cluster, "wait", "--for=condition=Established", "--timeout=60s",
                   f"crd/{name}.apps.edgefleet.io")  # fmt: skip
        assert wait.returncode == 0, wait.stderr
