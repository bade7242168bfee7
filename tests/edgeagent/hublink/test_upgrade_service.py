"""The agent's upgrade service on its real hub link, against a real hub with the upgrade
extension on the embedded API, over real QUIC with real certificates: the order arrives,
the artifact comes in chunks over the session, the new venv is built beside the running
one (real pip) and switched, the restart is asked for, the progress reaches the status."""

from __future__ import annotations

import asyncio
import hashlib
import pathlib
import shutil

import pytest

from cloudhub.kube import KubeClient
from cloudhub.upgrade.cli import EDGEUPGRADES
from edgeagent.agent import Agent
from edgeagent.sdnotify import Notifier
from edgeagent.settings import AgentSettings, HubSettings, RuntimeSettings, StoreSettings
from edgeagent.upgrade import CHUNK_BYTES, Layout, guard
from edgeagent.upgrade.service import upgrade_service
from edgeagent.upgrade.settings import UpgradeSettings
from edgeagent.uplink.session import HubLink
from tests.edgeagent.hublink.fleet import HubRunner, eventually, write_node_pki
from tests.edgeagent.upgrade.wheels import copy_venv, make_venv, make_wheel, sha256


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("upgrade-template")
    prefix = root / "edgeagent"
    make_venv(prefix, make_wheel(root, "0.0.9"))
    return prefix


async def test_an_order_over_the_real_link_is_fetched_installed_and_switched(
    upgrade_hub: HubRunner,
    kube: KubeClient,
    pki_ca,
    tmp_path: pathlib.Path,
    template: pathlib.Path,
) -> None:
    # newer than the agent; served from the hub's artifact directory
    wheel = make_wheel(tmp_path / "artifacts", "9.0.0", padding=2 * CHUNK_BYTES)
    digest = sha256(wheel)
    prefix = tmp_path / "opt" / "edgeagent"
    prefix.parent.mkdir()
    copy_venv(template, prefix)
    node = "edge-upgrade"
    state = tmp_path / node
    write_node_pki(state / "pki", pki_ca.ca, node)
    settings = AgentSettings(
        node_name=node,
        state_dir=state,
        node_ip="127.0.0.1",
        runtime=RuntimeSettings(kind="process"),
        store=StoreSettings(commit_delay=0.05),
        hub=HubSettings(url=upgrade_hub.url, backoff_base=0.1, backoff_cap=0.5, healthy_after=0.5),
        upgrade=UpgradeSettings(enabled=True, prefix=str(prefix)),
    )
    # As edgeagent run wires it: the restart stops this agent (systemd starts the new one).
    stop = asyncio.Event()
    link = HubLink()
    service = upgrade_service(settings, link, stop)
    agent = Agent(settings, notifier=Notifier.from_env({}), services=[link, service])
    task = asyncio.create_task(agent.run(stop), name="test-agent")
    try:
        await eventually(lambda: link.connection_id() is not None, "hub session open")
        name = "agent-9"
        await kube.create(
            EDGEUPGRADES,
            {
                "apiVersion": "apps.edgefleet.io/v1alpha1",
                "kind": "EdgeUpgrade",
                "metadata": {"name": name},
                "spec": {
                    "version": "9.0.0",
                    "artifact": {
                        "sha256": digest,
                        "name": wheel.name,
                        "size": wheel.stat().st_size,
                    },
                },
            },
        )
        await asyncio.wait_for(asyncio.shield(task), 120)  # the agent stopped itself
        assert stop.is_set()
        assert Layout(prefix).version() == "9.0.0"
        assert Layout(prefix).version(Layout(prefix).previous) == "0.0.9"
        cached = state / "upgrade" / "artifacts" / digest / wheel.name
        assert hashlib.sha256(cached.read_bytes()).hexdigest() == digest
        assert guard.probation(state)["version"] == "9.0.0"

        async def installing() -> bool:
            status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
            nodes = {e["name"]: e for e in status.get("nodes") or ()}
            return nodes.get(node, {}).get("phase") == "Installing"

        await eventually(installing, "the node's Installing in the status")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        shutil.rmtree(tmp_path / "opt", ignore_errors=True)
