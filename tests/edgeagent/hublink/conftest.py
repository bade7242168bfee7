"""Fixtures for the end-to-end tests: embedded API, a hub on it, agents as processes.

Each test gets a fresh in-memory embedded API server and a hub on one free port;
``fleet.agent(...)`` starts ``python -m edgeagent run`` processes pointed at it. At the
end every agent is stopped and its containers or processes are removed.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.edgeagent.hublink.fleet import AgentProcess, HubRunner, free_port, unique
from tests.edgeagent.hublink.upgrades import upgrade_hub as _upgrade_hub
from tests.testpki import TestPKI


@pytest.fixture
async def api() -> AsyncIterator[EmbeddedAPIServer]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as server:
        yield server


@pytest.fixture
async def kube(api: EmbeddedAPIServer) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def upgrade_hub(
    api: EmbeddedAPIServer, kube: KubeClient, pki_ca: TestPKI, tmp_path: pathlib.Path
) -> AsyncIterator[HubRunner]:
    """A hub with the upgrade extension serving ``tmp_path / "artifacts"`` (empty: the test
    puts its wheels there), a pass every 0.1 s, the EdgeUpgrade CRD applied."""
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    async with _upgrade_hub(api.kubeconfig_path, kube, pki_ca.server, artifacts) as runner:
        yield runner


@pytest.fixture
async def namespace(kube: KubeClient) -> str:
    name = unique("e2e")
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


class Fleet:
    """The hub and the agents of one test."""

    def __init__(self, root: pathlib.Path, hub: HubRunner, pki: TestPKI, request) -> None:
        self.root = root
        self.hub = hub
        self.pki = pki
        self.agents: list[AgentProcess] = []
        self._request = request

    def agent(
        self, node: str, kind: str = "process", *, start: bool = True, sets: tuple[str, ...] = ()
    ) -> AgentProcess:
        engine = self._request.getfixturevalue("podman") if kind == "docker" else None
        agent = AgentProcess(
            self.root / node, node, kind, self.hub.url, self.pki.ca, engine=engine, sets=sets
        )
        self.agents.append(agent)
        if start:
            agent.start()
        return agent

    async def close(self) -> list[str]:
        logs = []
        for agent in self.agents:
            try:
                await agent.stop()
            except Exception as exc:  # keep cleaning up the others
                logs.append(f"{agent.node}: stop failed: {exc}")
            try:
                await agent.remove_everything()
            except Exception as exc:
                logs.append(f"{agent.node}: cleanup failed: {exc}")
        await self.hub.stop()
        return logs


@pytest.fixture
async def fleet(
    api: EmbeddedAPIServer, pki_ca: TestPKI, tmp_path: pathlib.Path, request
) -> AsyncIterator[Fleet]:
    hub = HubRunner(api.kubeconfig_path, pki_ca.server, free_port())
    await hub.start()
    f = Fleet(tmp_path, hub, pki_ca, request)
    failed: list[Any] = []
    try:
        yield f
    finally:
        problems = await f.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for agent in f.agents:
                print(f"===== agent {agent.node} log =====\n{agent.log()[-20000:]}")
        failed.extend(problems)
    assert not failed, failed


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (the fleet fixture prints agent logs when the
    test failed)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
