"""Fixtures for end-to-end tests through ``cloudhub serve``: the hub as a process on its
embedded API (what a one-machine install runs), real agents as processes.

``hub`` is ``python -m cloudhub serve`` (``tests.bench.bench_e2e.HubProcess``: real TLS
from the session's test CA, QUIC and WebSocket on one loopback port, ``/metrics`` on
another) with the tests' short node intervals; it can be stopped and started again on
the same ports and data (a hub outage). ``agent(node, *sets)`` starts
``python -m edgeagent run`` (process runtime) pointed at it. Everything is stopped at the
end of the test and the agents' logs are printed when it failed.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Callable

import pytest

from cloudhub.devtools.engine import PodmanEngine
from cloudhub.kube import KubeClient
from tests.bench.bench_e2e import HubProcess
from tests.edgeagent.hublink.fleet import AgentProcess
from tests.k8s.fixtures import kubectl  # noqa: F401  (session fixture)
from tests.testpki import TestPKI

#: ``cloudhub serve`` flags for tests: short node intervals (seconds).
HUB_TEST_FLAGS = (
    "--nodes-lease-interval",
    "1",
    "--nodes-status-report-interval",
    "2",
    "--session-heartbeat-interval",
    "2",
    "--session-close-timeout",
    "1",
)


@pytest.fixture
async def hub(tmp_path: pathlib.Path, pki_ca: TestPKI, request) -> AsyncIterator[HubProcess]:
    """The hub process; more ``cloudhub serve`` flags through indirect parametrization."""
    process = HubProcess(tmp_path / "hub", pki_ca)
    process.args += (*HUB_TEST_FLAGS, *getattr(request, "param", ()))
    await asyncio.to_thread(process.start)
    try:
        yield process
    finally:
        await asyncio.to_thread(process.stop)


@pytest.fixture
async def kube(hub: HubProcess) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_kubeconfig(str(hub.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def agent(
    hub: HubProcess, pki_ca: TestPKI, tmp_path: pathlib.Path, request
) -> AsyncIterator[Callable[..., AgentProcess]]:
    agents: list[AgentProcess] = []

    def start(
        node: str, *sets: str, runtime: str = "process", engine: PodmanEngine | None = None
    ) -> AgentProcess:
        process = AgentProcess(
            tmp_path / node,
            node,
            runtime,
            f"quic://127.0.0.1:{hub.port}",
            pki_ca.ca,
            sets=sets,
            engine=engine,
        )
        agents.append(process)
        process.start()
        return process

    try:
        yield start
    finally:
        problems = []
        for process in agents:
            try:
                await process.stop()
                await process.remove_everything()
            except Exception as exc:  # keep cleaning up the others
                problems.append(f"{process.node}: {exc}")
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for process in agents:
                print(f"===== agent {process.node} log =====\n{process.log()[-20000:]}")
            print(f"===== hub log =====\n{(hub.root / 'hub.log').read_text()[-20000:]}")
        assert not problems, problems


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (the agent fixture prints logs on failure)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
