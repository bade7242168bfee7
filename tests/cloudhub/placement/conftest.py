"""Fixtures for placement through the real hub: ``cloudhub``'s ``Hub`` on its own embedded
API with the placement extension installed (as ``cloudhub serve`` does), simulated agents
speaking the real protocol over loopback WebSocket/QUIC with certificates from a test CA,
and a client of that API for the test's own reads and writes."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cloudhub.errors import KubeConflict
from cloudhub.hub import Hub
from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.placement.extension import PlacementExtension, placement_extension
from cloudhub.settings import load_hub_settings
from tests.k8s.fixtures import kube_apiserver  # noqa: F401  (session fixture)
from tests.sim import SimAgent, default_node_info, node_credentials
from tests.testpki import TestPKI
from tests.waiting import eventually as eventually  # re-exported: the one polling helper

#: Generous deadline for a condition on a loaded 2-core machine (seconds).
DEADLINE_S = 45.0

#: Hub settings for these tests: loopback, free ports, short intervals (seconds).
HUB_SETTINGS: dict[str, Any] = {
    "listen.quic_host": "127.0.0.1",
    "listen.quic_port": 0,
    "listen.websocket_host": "127.0.0.1",
    "listen.websocket_port": 0,
    "observability.http_host": "127.0.0.1",
    "observability.http_port": 0,
    "kube.embedded_port": 0,
    "nodes.lease_interval": 0.5,
    "nodes.lease_duration": 2,
    "nodes.not_ready_grace": 1.5,
    "nodes.status_report_interval": 1.0,
    "session.heartbeat_interval": 2.0,
    "session.liveness_timeout": 10.0,
    "session.close_timeout": 1.0,
    "status.retry_cap": 0.5,
    "placement.settle": 0.01,
    "placement.resync": 0.5,
}


class PlacementHub:
    """A hub with placement on its embedded API, and the agents of one test."""

    def __init__(self, tmp: pathlib.Path, pki_ca: TestPKI) -> None:
        self.tmp = tmp
        self.pki = pki_ca
        self.hub: Hub | None = None
        self.extension: PlacementExtension | None = None
        self.kube: KubeClient | None = None
        self.agents: dict[str, SimAgent] = {}

    async def start(self, **overrides: Any) -> Hub:
        """Start the hub (dotted setting keys as overrides) and a client of its API: its
        embedded API, or the cluster of ``kube.kubeconfig`` when that is given."""
        values = {**HUB_SETTINGS, "kube.embedded_data_dir": str(self.tmp / "api")}
        values.update(overrides)
        settings = load_hub_settings(overrides=values)
        self.extension = placement_extension(settings.placement)
        hub = Hub(settings, credentials=self.pki.server, extensions=[self.extension])
        self.hub = hub
        await hub.start()
        kubeconfig = settings.kube.kubeconfig or self.tmp / "api" / "kubeconfig"
        self.kube = await KubeClient.from_kubeconfig(str(kubeconfig))
        return hub

    async def restart(self) -> Hub:
        """Stop the hub and start another on the same API data and the same edge ports
        (the agents reconnect to it on their own)."""
        assert self.hub is not None and self.kube is not None
        ports = {
            "listen.quic_port": self.hub.quic_port,
            "listen.websocket_port": self.hub.websocket_port,
        }
        kubeconfig = self.hub.settings.kube.kubeconfig
        if kubeconfig is not None:
            ports["kube.kubeconfig"] = str(kubeconfig)
        await self.kube.close()
        self.kube = None
        await self.hub.aclose()
        self.hub = None
        return await self.start(**ports)

    async def namespace(self, name: str) -> str:
        assert self.kube is not None
        with contextlib.suppress(KubeConflict):  # the shared kube-apiserver may have it
            await self.kube.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        return name

    def agent(self, name: str, labels: dict[str, str], *, transport: str = "websocket") -> SimAgent:
        """A started simulated agent whose node carries ``labels``."""
        assert self.hub is not None
        info = default_node_info(name)
        info["labels"] = dict(labels)
        agent = SimAgent(
            name,
            node_credentials(self.pki.ca, name),
            host="127.0.0.1",
            quic_port=self.hub.quic_port or 0,
            websocket_port=self.hub.websocket_port or 0,
            transport=transport,
            node_info=info,
        )
        self.agents[name] = agent
        agent.start()
        return agent

    def replace_agent(self, agent: SimAgent) -> SimAgent:
        """The same machine back after an outage: its store kept, started again."""
        again = agent.restarted()
        self.agents[agent.name] = again
        again.start()
        return again

    async def close(self) -> None:
        await asyncio.gather(*(agent.stop() for agent in self.agents.values()))
        if self.kube is not None:
            await self.kube.close()
        if self.hub is not None:
            await self.hub.aclose()


@pytest.fixture
async def placement_hub(tmp_path: pathlib.Path, pki_ca: TestPKI) -> AsyncIterator[PlacementHub]:
    h = PlacementHub(tmp_path, pki_ca)
    try:
        yield h
    finally:
        await h.close()
