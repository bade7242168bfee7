"""Issue 19's acceptance test: three real agents installed by deploy/install.sh into
roots, upgraded by an EdgeUpgrade from this tree's version to a locally built next one.

Real everything but systemd: the embedded API, a hub in this process with the upgrade
extension serving the wheel over the sessions (QUIC, mTLS), the agents as processes of
their installed venvs (``<root>/opt/edgeagent/bin/python -m edgeagent run`` with the
config install.sh wrote, ``upgrade: {enabled: true}``), the process runtime's pods. The
systemd stand-in (:class:`Unit`) does what the unit file asks: before every start it runs
the installed start guard with the system's Python (``ExecStartPre=-``), and it starts
the agent again whenever it exits (``Restart=always``), leaving the pods alone
(``KillMode=process``).

One node's new version is made to fail: its stand-in starts the new version with a
config file that does not exist, so the new agent exits at every start; the guard puts
the previous venv back (``CrashedAtStart``). With ``failurePolicy: Pause`` and
``maxFailures: 0`` the rollout pauses while the other node of that batch finishes; raising
``maxFailures`` resumes it, and the third node, offline when its batch comes, stays
Pending (``NodeOffline``) and finishes once it is back. No pod restarts anywhere: every
pod keeps its container id, its process and a restart count of 0.

The Kubernetes side here is the EdgeUpgrade's status and the Nodes' annotations, which
tests/contract/test_edgeupgrade_crd.py checks on both the embedded API and the reference
kube-apiserver; this test runs on the embedded API only (it is the slowest of the area).
"""

from __future__ import annotations

import asyncio
import hashlib
import pathlib
import shutil
from collections.abc import AsyncIterator

import pytest

from cloudhub.kube import NAMESPACES, PODS, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from cloudhub.upgrade.cli import EDGEUPGRADES
from edgeagent.upgrade import Layout
from tests.deploy.wheels import build_wheel
from tests.edgeagent.hublink.fleet import eventually
from tests.edgeagent.hublink.objects import container_status, get_pod, is_running, pod
from tests.edgeagent.hublink.upgrades import upgrade_hub
from tests.environment import missing
from tests.upgrade.installed import Unit, bumped, current_version, install_roots

pytestmark = pytest.mark.slow

NODES = ("edge-up-a", "edge-up-b", "edge-up-c")
BAD = "edge-up-b"  # its new version exits at start
OFFLINE = "edge-up-c"  # offline when its batch comes


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


async def status_of(kube: KubeClient, name: str) -> dict:
    return (await kube.get(EDGEUPGRADES, name)).get("status") or {}


def entries(status: dict) -> dict[str, dict]:
    return {e["name"]: e for e in status.get("nodes") or ()}


async def test_three_installed_agents_upgrade_one_rolls_back_one_returns_late(
    api, kube: KubeClient, pki_ca, tmp_path: pathlib.Path
) -> None:
    if shutil.which("systemctl") is None:
        missing("systemctl", "install.sh --root enables the unit with systemctl --root")
    old, new = current_version(), bumped(current_version())
    roots = await install_roots(tmp_path, NODES)
    artifacts = tmp_path / "artifacts"
    next_wheel = await asyncio.to_thread(build_wheel, tmp_path / "next", version=new)
    artifacts.mkdir()
    served = artifacts / next_wheel.name
    served.write_bytes(next_wheel.read_bytes())
    digest = hashlib.sha256(served.read_bytes()).hexdigest()

    hubs = upgrade_hub(api.kubeconfig_path, kube, pki_ca.server, artifacts, interval=0.2)
    async with hubs as hub:
        units = {
            node: Unit(root, node, hub.url, pki_ca.ca, bad_version=new if node == BAD else "")
            for node, root in roots.items()
        }
        namespace = "upgrade-acceptance"
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        try:
            for unit in units.values():
                unit.up()
            for node in NODES:
                await kube.create(PODS, pod(f"app-{node}", namespace, node, "exec sleep 3600"))

            async def all_running() -> bool:
                pods = [await get_pod(kube, namespace, f"app-{n}") for n in NODES]
                return all(is_running(p) for p in pods)

            await eventually(all_running, "every node's pod Running", timeout=120)
            before = {
                n: container_status(await get_pod(kube, namespace, f"app-{n}"))["containerID"]
                for n in NODES
            }

            await units[OFFLINE].down()  # offline before the rollout reaches it
            name = "agent-next"
            await kube.create(
                EDGEUPGRADES,
                {
                    "apiVersion": "apps.edgefleet.io/v1alpha1",
                    "kind": "EdgeUpgrade",
                    "metadata": {"name": name},
                    "spec": {
                        "version": new,
                        "artifact": {"sha256": digest, "name": served.name},
                        "maxUnavailable": 2,
                        "healthGate": {"podsReady": True, "timeoutSeconds": 300},
                        "failurePolicy": "Pause",
                        "maxFailures": 0,
                        "offlinePolicy": "Wait",
                    },
                },
            )

            async def paused() -> bool:
                status = await status_of(kube, name)
                nodes = entries(status)
                return (
                    status.get("phase") == "Paused"
                    and nodes.get(NODES[0], {}).get("phase") == "Healthy"
                    and nodes.get(BAD, {}).get("phase") == "RolledBack"
                )

            await eventually(paused, "a Healthy, b RolledBack, the rollout Paused", timeout=300)
            status = await status_of(kube, name)
            assert entries(status)[BAD]["reason"] == "CrashedAtStart", status
            assert status.get("reason") == "FailureBudgetExceeded", status
            assert entries(status)[OFFLINE]["phase"] == "Pending", status
            assert Layout(units[NODES[0]].prefix).version() == new
            bad = Layout(units[BAD].prefix)
            assert bad.version() == old and bad.version(bad.failed) == new
            assert units[BAD].starts.count(new) >= 1 and units[BAD].starts[-1] == old
            assert any("rolled back" in out for out in units[BAD].guard_outputs)

            # Resume (the failure budget raised): the offline node's batch comes; it waits.
            await kube.patch(EDGEUPGRADES, name, {"spec": {"maxFailures": 1}})

            async def waiting_offline() -> bool:
                entry = entries(await status_of(kube, name)).get(OFFLINE, {})
                return entry.get("phase") == "Pending" and entry.get("reason") == "NodeOffline"

            await eventually(waiting_offline, "the offline node Pending (NodeOffline)", timeout=120)
            units[OFFLINE].up()

            async def completed() -> bool:
                status = await status_of(kube, name)
                return (
                    status.get("phase") == "Completed"
                    and entries(status).get(OFFLINE, {}).get("phase") == "Healthy"
                )

            await eventually(completed, "the returned node Healthy, the rollout Completed", 300)
            assert Layout(units[OFFLINE].prefix).version() == new

            # No pod restarts: same container, same process, restartCount 0, on every node.
            for n in NODES:
                current = container_status(await get_pod(kube, namespace, f"app-{n}"))
                assert current["containerID"] == before[n], (n, current)
                assert current.get("restartCount", 0) == 0, (n, current)
        except BaseException:
            for unit in units.values():
                print(f"===== {unit.node} =====\n{unit.log()[-8000:]}")
            raise
        finally:
            for unit in units.values():
                await unit.down()
                await unit.remove_everything()
