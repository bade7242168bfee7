"""``cloudhub placement explain`` against a live API, as an operator runs it (issue 15 item
11): a real hub with placement on the embedded API or bridged to the reference
kube-apiserver, simulated agents speaking the real protocol, and the command run as its
own process. A connected node is online (its Lease is fresh) although its Node's Ready
heartbeat is as old as the hub leaves it between status reports, a Ready replica counts
as Ready, ``$KUBECONFIG`` is honoured like the other commands, and a node whose session
ended shows offline once its Lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import sys
import time
import uuid
from typing import Any

import pytest
import yaml

from cloudhub.errors import KubeAPIError, KubeConflict
from cloudhub.kube import CRDS, NODES, KubeClient, micro_time, update_with_retry
from cloudhub.placement.controller import EDGEPLACEMENTS
from tests.cloudhub.placement.conftest import PlacementHub, eventually
from tests.cloudhub.placement.fleet import template
from tests.cloudhub.placement.test_hub_e2e import fleet_known

REPO = pathlib.Path(__file__).resolve().parents[3]
NAME = "web"

#: Between two status reports the hub leaves a connected node's Ready heartbeat alone for
#: nodes.status_report_interval (kubelet's 5 min); its Lease is renewed every
#: lease_interval. The Lease duration is long enough that a loaded machine never lets it
#: lapse for a connected node, short enough that a lost one expires within the test.
HUB = {
    "nodes.status_report_interval": 300.0,
    "nodes.lease_interval": 0.5,
    "nodes.lease_duration": 6,
}

BACKENDS = ["embedded", pytest.param("kube-apiserver", marks=pytest.mark.kubeapiserver)]


@pytest.fixture(params=BACKENDS)
async def hub_and_kubeconfig(
    request: pytest.FixtureRequest, placement_hub: PlacementHub
) -> tuple[PlacementHub, str, str]:
    """The hub started on the backend, the namespace of the test, and the kubeconfig an
    operator would use."""
    run = uuid.uuid4().hex[:6]
    overrides: dict[str, Any] = dict(HUB)
    if request.param == "kube-apiserver":
        server = request.getfixturevalue("kube_apiserver")
        admin = await KubeClient.from_kubeconfig(str(server.kubeconfig))
        try:
            crd = yaml.safe_load(
                (REPO / "deploy/crds/edgeplacements.apps.edgefleet.io.yaml").read_text()
            )
            with contextlib.suppress(KubeConflict):
                await admin.create(CRDS, crd)  # as the operator applies deploy/crds
        finally:
            await admin.close()
        overrides["kube.kubeconfig"] = str(server.kubeconfig)
        kubeconfig = str(server.kubeconfig)
    else:
        kubeconfig = str(placement_hub.tmp / "api" / "kubeconfig")
    namespace = f"explain-{run}"
    overrides["placement.namespace"] = namespace
    await placement_hub.start(**overrides)
    await placement_hub.namespace(namespace)
    return placement_hub, namespace, kubeconfig


async def explain(namespace: str, *, kubeconfig: str | None, env_kubeconfig: str | None) -> str:
    """``python -m cloudhub placement explain`` in its own process; its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = str(REPO)
    if env_kubeconfig is not None:
        env["KUBECONFIG"] = env_kubeconfig
    args = ["placement", "explain", NAME, "-n", namespace]
    if kubeconfig is not None:
        args += ["--kubeconfig", kubeconfig]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cloudhub",
        *args,
        env=env,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    return stdout.decode()


def line_of(output: str, node: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith(f"{node}: ")]
    return line


async def age_heartbeats(kube: KubeClient, nodes: list[str], age_s: float) -> None:
    """Make every Ready heartbeat ``age_s`` old: the Node as the API holds it that long
    after the hub's last status report (the Lease, renewed by the hub, stays fresh)."""
    stamp = micro_time(time.time() - age_s)

    def aged(node: dict) -> dict:
        for condition in node["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["lastHeartbeatTime"] = stamp
        return node

    for name in nodes:
        await update_with_retry(kube, NODES, name, None, aged, subresource="status")


async def test_explain_reads_connectivity_and_readiness_from_the_api(
    hub_and_kubeconfig: tuple[PlacementHub, str, str],
) -> None:
    h, namespace, kubeconfig = hub_and_kubeconfig
    kube = h.kube
    assert kube is not None
    run = namespace.rsplit("-", 1)[1]
    nodes = [f"ex-{run}-{i}" for i in range(3)]
    for name in nodes:
        h.agent(name, {"run": run})
    await fleet_known(h, set(nodes))
    placement = {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgePlacement",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "template": template(),
            "replicas": 2,
            "nodeSelector": {"matchLabels": {"run": run}},
        },
    }

    async def served() -> bool:
        try:
            await kube.create(EDGEPLACEMENTS, placement, namespace)
        except KubeAPIError:
            return False
        return True

    await eventually(served, "the EdgePlacement CRD served")

    async def ready() -> bool:
        status = (await kube.get(EDGEPLACEMENTS, NAME, namespace)).get("status") or {}
        return status.get("ready") == 2

    await eventually(ready, "both replicas Ready in the placement's status")
    await age_heartbeats(kube, nodes, 55)

    # With --kubeconfig: every node online, each replica Ready, the placement available.
    output = await explain(namespace, kubeconfig=kubeconfig, env_kubeconfig=None)
    chosen = [n for n in nodes if line_of(output, n).startswith(f"{n}: chosen")]
    assert len(chosen) == 2, output
    for name in chosen:
        assert "1 of 1 Ready" in line_of(output, name)
    assert not any("offline" in line_of(output, n) for n in nodes), output
    (idle,) = set(nodes) - set(chosen)
    assert "eligible, not needed" in line_of(output, idle)
    assert "Available=True (MinimumReplicasAvailable): 2 of 2 replicas ready" in output

    # $KUBECONFIG alone, as kubectl and `cloudhub token` take it.
    assert await explain(namespace, kubeconfig=None, env_kubeconfig=kubeconfig) == output

    # A node whose session ended is offline once its Lease expires (its replica is kept
    # within the offline tolerance), and its replica no longer counts as Ready.
    lost = chosen[0]
    await h.agents[lost].stop()
    last: dict[str, str] = {}

    async def offline() -> bool:
        last["output"] = await explain(namespace, kubeconfig=None, env_kubeconfig=kubeconfig)
        return "(within the tolerance: kept)" in line_of(last["output"], lost)

    await eventually(offline, f"explain to see {lost} offline", state=lambda: last.get("output"))
    assert "offline for" in line_of(last["output"], lost)
    assert "1 of 2 replicas ready" in last["output"]
