"""Fixtures for the agent's certificates against a real hub: the embedded API (in memory,
in the test's loop), a ``cloudhub.hub.Hub`` with the PKI extension on fixed free ports (so
that the join answer's session port is the one it listens on), and helpers that run the
``cloudhub`` and ``edgeagent`` commands as separate processes, as an operator would."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from cloudhub.hub import Hub
from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.pki.extension import PKIExtension, pki_extension
from cloudhub.settings import load_hub_settings
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.edgeagent.hublink.fleet import HUB_TEST_SETTINGS, free_port

ROOT = pathlib.Path(__file__).resolve().parents[3]
NAMESPACE = "edgefleet"


def python_env() -> dict[str, str]:
    """The environment for processes that import this worktree's code."""
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


async def command(
    *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m ARGS...`` as a separate process (``env`` added to its environment); its
    output as text."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *args,
        env={**python_env(), **(env or {})},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


@pytest.fixture
async def api() -> AsyncIterator[EmbeddedAPIServer]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as server:
        yield server


@pytest.fixture
async def kube(api: EmbeddedAPIServer) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
    try:
        await client.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        yield client
    finally:
        await client.close()


@dataclass
class PKIHub:
    """A hub with the PKI extension: sessions on ``port`` (QUIC and WebSocket), joins on
    ``join_port``."""

    hub: Hub
    extension: PKIExtension
    port: int
    join_port: int
    kubeconfig: str

    @property
    def pki(self) -> Any:
        assert self.extension.pki is not None
        return self.extension.pki

    @property
    def url(self) -> str:
        return f"quic://127.0.0.1:{self.port}"

    @property
    def join_address(self) -> str:
        return f"127.0.0.1:{self.join_port}"

    def session(self, node: str) -> Any:
        """The node's open session on the hub, or ``None``."""
        session = self.hub.registry.get(node)
        return session if session is not None and not session.closed else None


@pytest.fixture
async def pki_hub(api: EmbeddedAPIServer, kube: KubeClient, request) -> AsyncIterator[PKIHub]:
    """A started hub; ``@pytest.mark.parametrize("pki_hub", [{"pki.X": ...}], indirect=True)``
    overrides settings."""
    port, join_port = free_port(), free_port()
    values = {
        **HUB_TEST_SETTINGS,
        "kube.kubeconfig": str(api.kubeconfig_path),
        "listen.quic_port": port,
        "listen.websocket_port": port,
        "pki.namespace": NAMESPACE,
        "pki.join_host": "127.0.0.1",
        "pki.join_port": join_port,
        "pki.session_port": port,
        # The first name is the one join commands print: an address, so that the agent
        # dials the loopback address the hub listens on (localhost may resolve to ::1).
        "pki.server_names": "127.0.0.1,localhost",
        **getattr(request, "param", {}),
    }
    extension = pki_extension(load_hub_settings(overrides=values).pki)
    hub = Hub(load_hub_settings(overrides=values), extensions=[extension])
    try:
        await hub.start()
        yield PKIHub(hub, extension, port, join_port, str(api.kubeconfig_path))
    finally:
        await hub.aclose()
