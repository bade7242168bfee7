"""Fixtures for the hub PKI tests: the embedded API (in memory, in the test's loop), an API
client, and started ``HubPKI`` instances with a join endpoint on a free port."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.pki import HubPKI, PKISettings
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer

NAMESPACE = "edgefleet"
REPO = pathlib.Path(__file__).resolve().parents[3]


@dataclasses.dataclass
class Cluster:
    """The embedded API and an admin client for it."""

    api: EmbeddedAPIServer
    client: KubeClient

    @property
    def kubeconfig(self) -> str:
        return str(self.api.kubeconfig_path)

    async def new_client(self, **kwargs: Any) -> KubeClient:
        """Another client (as another replica or the CLI would have)."""
        return await KubeClient.from_kubeconfig(self.kubeconfig, **kwargs)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with client:
            await client.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
            yield Cluster(api=api, client=client)


def pki_settings(**overrides: Any) -> PKISettings:
    """Test settings: join endpoint on a free loopback port, loopback names."""
    values: dict[str, Any] = {
        "namespace": NAMESPACE,
        "join_host": "127.0.0.1",
        "join_port": 0,
        "server_names": ("localhost", "127.0.0.1"),
    }
    values.update(overrides)
    return PKISettings(**values)


@pytest.fixture
async def start_hub(cluster: Cluster) -> AsyncIterator[Callable[..., Any]]:
    """``await start_hub(clock=..., **settings)`` -> a started HubPKI (closed after the
    test); ``clock`` is the hub's wall clock (a :class:`tests.clock.ManualClock`)."""
    started: list[tuple[HubPKI, KubeClient]] = []

    async def start(
        *, client: KubeClient | None = None, clock: Any = None, **overrides: Any
    ) -> HubPKI:
        own = client or await cluster.new_client()
        extra = {"clock": clock} if clock is not None else {}
        hub = HubPKI(own, pki_settings(**overrides), **extra)
        await hub.start()
        started.append((hub, own))
        return hub

    yield start
    for hub, own in reversed(started):
        await hub.close()
        with contextlib.suppress(Exception):
            await own.close()


def join_address(hub: HubPKI, host: str = "localhost") -> str:
    return f"{host}:{hub.join_server.port}"


def python_env() -> dict[str, str]:
    """Environment for subprocesses that import this worktree's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable
