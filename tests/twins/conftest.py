"""Fixtures for the device-twin end-to-end tests: an embedded API with the device CRDs, a
hub in this process with the twins extension (as ``cloudhub serve`` installs it), and real
agents (``python -m edgeagent run``) whose local device API the tests use as a mapper."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from cloudhub.devices.extension import devices_extension
from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from edgeagent.mappers import DeviceClient
from tests.edgeagent.hublink.fleet import AgentProcess, HubRunner, free_port, unique
from tests.testpki import TestPKI
from tests.twins.kubeedge import install_device_crds


@pytest.fixture
async def api() -> AsyncIterator[EmbeddedAPIServer]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as server:
        yield server


@pytest.fixture
async def kube(api: EmbeddedAPIServer) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
    try:
        await install_device_crds(client)
        yield client
    finally:
        await client.close()


@pytest.fixture
async def namespace(kube: KubeClient) -> str:
    name = unique("twins")
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


class TwinFleet:
    """The hub (restartable on its port) and the agents of one test."""

    def __init__(self, root: pathlib.Path, hub: HubRunner, pki: TestPKI) -> None:
        self.root = root
        self.hub = hub
        self.pki = pki
        self.agents: list[AgentProcess] = []

    def agent(self, node: str) -> AgentProcess:
        agent = AgentProcess(self.root / node, node, "process", self.hub.url, self.pki.ca)
        self.agents.append(agent)
        agent.start()
        return agent

    @staticmethod
    def mapper(agent: AgentProcess) -> DeviceClient:
        """A mapper's client on the agent's device API (its Unix socket)."""
        return DeviceClient(str(agent.state / "devices.sock"), timeout=30.0)

    async def close(self) -> None:
        for agent in self.agents:
            try:
                await agent.stop()
            except Exception:  # keep stopping the others
                agent.kill()
        await self.hub.stop()


@pytest.fixture
async def fleet(
    api: EmbeddedAPIServer, kube: KubeClient, pki_ca: TestPKI, tmp_path: pathlib.Path, request
) -> AsyncIterator[TwinFleet]:
    hub = HubRunner(
        api.kubeconfig_path,
        pki_ca.server,
        free_port(),
        extensions=lambda settings: [devices_extension(settings.devices)],
    )
    await hub.start()
    f = TwinFleet(tmp_path, hub, pki_ca)
    try:
        yield f
    finally:
        await f.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for agent in f.agents:
                print(f"===== agent {agent.node} log =====\n{agent.log()[-20000:]}")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (agent logs are printed for failed tests)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
