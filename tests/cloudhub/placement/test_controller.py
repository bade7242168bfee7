"""The placement controller against the embedded API, through kubernetes_asyncio.

Nothing is mocked: the embedded API server runs on loopback HTTPS, the
controller talks to it with the real client, and the tests act as the hub
and the kubelets would (writing Node heartbeats and Pod readiness through the
status subresources).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cloudhub.kube import CRDS, DAEMONSETS, DEPLOYMENTS, NODES, PODS, KubeClient
from cloudhub.placement import LABEL_GROUP, LABEL_PLACEMENT
from cloudhub.placement.controller import (
    EDGEPLACEMENTS,
    ControllerSettings,
    PlacementController,
)
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.cloudhub.placement.fleet import stamp, template
from tests.waiting import eventually

DEADLINE_S = 30.0
NS = "default"


KUBECONFIG: list[str] = []


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as server:
        KUBECONFIG[:] = [str(server.kubeconfig_path)]
        client = await KubeClient.from_kubeconfig(str(server.kubeconfig_path))
        try:
            yield client
        finally:
            await client.close()


async def start(kube: KubeClient, **settings: Any) -> tuple[PlacementController, asyncio.Task]:
    controller = PlacementController(
        kube, ControllerSettings(settle_s=0.01, resync_s=0.5, **settings)
    )
    task = asyncio.create_task(controller.run(), name="test-placement-controller")
    await eventually(lambda: _served(kube), "the EdgePlacement CRD to be served")
    return controller, task


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _served(kube: KubeClient) -> bool:
    try:
        await kube.list(EDGEPLACEMENTS, NS)
    except Exception:
        return False
    return True


async def add_node(kube: KubeClient, name: str, labels: dict[str, str], cpu: str = "4") -> None:
    await kube.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    )
    await heartbeat(kube, name, cpu=cpu)


async def heartbeat(
    kube: KubeClient, name: str, *, ready: bool = True, cpu: str = "4", at: float | None = None
) -> None:
    """Write the Node status as the hub does for a connected (or lost) node."""
    alloc = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
    when = stamp(time.time() if at is None else at)
    await patch_status(
        kube,
        NODES,
        name,
        None,
        {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "Unknown",
                    "lastHeartbeatTime": when,
                    "lastTransitionTime": when,
                }
            ],
        },
    )


async def patch_status(
    kube: KubeClient, rt: Any, name: str, namespace: str | None, status: dict[str, Any]
) -> None:
    await kube.patch(rt, name, {"status": status}, namespace, subresource="status")


async def pods_of(kube: KubeClient, owner: str) -> list[dict[str, Any]]:
    items, _ = await kube.list(PODS, NS)
    return [
        p
        for p in items
        if p["metadata"].get("labels", {}).get(LABEL_PLACEMENT) == owner
        and not p["metadata"].get("deletionTimestamp")
    ]


async def make_ready(kube: KubeClient, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        await patch_status(
            kube,
            PODS,
            pod["metadata"]["name"],
            NS,
            {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        )


def edge_placement(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgePlacement",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


async def test_edge_placement_end_to_end_with_failover(kube: KubeClient) -> None:
    for i in range(3):
        await add_node(kube, f"a{i}", {"site": "a"})
    await add_node(kube, "b0", {"site": "b"})
    _, task = await start(kube)
    try:
        crd = await kube.get(CRDS, "edgeplacements.apps.edgefleet.io")
        assert crd["spec"]["group"] == "apps.edgefleet.io"
        created = await kube.create(
            EDGEPLACEMENTS,
            edge_placement(
                "web",
                {
                    "template": template(),
                    "replicas": 4,
                    "groups": {"byLabel": "site"},
                    "offlineTolerationSeconds": 1,
                },
            ),
            NS,
        )

        pods = await eventually(lambda: _count(kube, "web", 4), "4 pods of web")
        assert Counter(p["metadata"]["labels"][LABEL_GROUP] for p in pods) == {"a": 2, "b": 2}
        for pod in pods:
            (owner,) = pod["metadata"]["ownerReferences"]
            assert owner["uid"] == created["metadata"]["uid"] and owner["controller"]
            assert pod["spec"]["nodeName"] in {"a0", "a1", "a2", "b0"}
        assert len({p["spec"]["nodeName"] for p in pods if p["spec"]["nodeName"] != "b0"}) == 2

        await make_ready(kube, pods)

        async def ready() -> bool:
            status = (await kube.get(EDGEPLACEMENTS, "web", NS)).get("status") or {}
            return status.get("ready") == 4 and status.get("placed") == 4

        await eventually(ready, "status ready=4")
        status = (await kube.get(EDGEPLACEMENTS, "web", NS))["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["Placed"]["status"] == "True"
        assert conditions["SpecValid"]["status"] == "True"
        assert [g["name"] for g in status["groups"]] == ["a", "b"]

        # A node of site a goes offline: after the 1 s tolerance its replica is
        # replaced by one on the idle node of the same site; the lost pod stays.
        (lost,) = [p for p in pods if p["spec"]["nodeName"] in ("a0", "a1", "a2")][:1]
        node = lost["spec"]["nodeName"]
        await heartbeat(kube, node, ready=False, at=time.time() - 5)

        async def replaced() -> list[dict[str, Any]] | None:
            now = await pods_of(kube, "web")
            return now if len(now) == 5 else None

        after = await eventually(replaced, "a replacement pod")
        (new,) = [
            p for p in after if p["metadata"]["name"] not in {q["metadata"]["name"] for q in pods}
        ]
        assert new["metadata"]["labels"][LABEL_GROUP] == "a"
        assert new["spec"]["nodeName"] not in (node, "b0")
        assert lost["metadata"]["name"] in {p["metadata"]["name"] for p in after}

        # The node returns; once the replacement is Ready, the returned pod goes.
        await heartbeat(kube, node)
        await make_ready(kube, [new])

        async def recovered() -> bool:
            now = await pods_of(kube, "web")
            return len(now) == 4 and lost["metadata"]["name"] not in {
                p["metadata"]["name"] for p in now
            }

        await eventually(recovered, "the surplus pod removed")
    finally:
        await stop(task)


async def _count(kube: KubeClient, owner: str, n: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, owner)
    return pods if len(pods) == n else None


async def test_invalid_spec_is_reported_in_status_and_keeps_pods(kube: KubeClient) -> None:
    await add_node(kube, "n0", {"site": "a"})
    _, task = await start(kube)
    try:
        await kube.create(
            EDGEPLACEMENTS,
            edge_placement(
                "web", {"template": template(), "replicas": 1, "groups": {"byLabel": "site"}}
            ),
            NS,
        )
        await eventually(lambda: _count(kube, "web", 1), "1 pod of web")
        bad = await kube.get(EDGEPLACEMENTS, "web", NS)
        bad["spec"]["overrides"] = [{"group": "a", "container": "nope", "image": "x:1"}]
        await kube.replace(EDGEPLACEMENTS, bad)  # a plain PUT of the edited object

        async def reported() -> dict | None:
            status = (await kube.get(EDGEPLACEMENTS, "web", NS)).get("status") or {}
            for condition in status.get("conditions") or []:
                if condition["type"] == "SpecValid" and condition["status"] == "False":
                    return condition
            return None

        condition = await eventually(reported, "SpecValid=False")
        assert "spec.overrides[0].container" in condition["message"]
        assert len(await pods_of(kube, "web")) == 1  # the last valid spec keeps running
    finally:
        await stop(task)


async def test_deployments_and_daemonsets_targeting_edge_nodes(kube: KubeClient) -> None:
    edge = {"node-role.kubernetes.io/edge": ""}
    for i in range(3):
        await add_node(kube, f"e{i}", dict(edge, site="a"))
    await add_node(kube, "cloud0", {"site": "a"})
    _, task = await start(kube, place_workloads=True)
    try:

        def workload(kind: str, name: str, selector: dict[str, str] | None) -> dict[str, Any]:
            tmpl = template(labels={"app": name})
            if selector is not None:
                tmpl["spec"]["nodeSelector"] = selector
            spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}, "template": tmpl}
            if kind == "Deployment":
                spec["replicas"] = 3
            return {
                "apiVersion": "apps/v1",
                "kind": kind,
                "metadata": {"name": name, "namespace": NS},
                "spec": spec,
            }

        dep = await kube.create(DEPLOYMENTS, workload("Deployment", "edge-web", edge), NS)
        await kube.create(DAEMONSETS, workload("DaemonSet", "edge-agent", edge), NS)
        await kube.create(DEPLOYMENTS, workload("Deployment", "cloud-web", None), NS)

        pods = await eventually(lambda: _count(kube, "edge-web", 3), "3 pods of edge-web")
        assert {p["spec"]["nodeName"] for p in pods} == {"e0", "e1", "e2"}
        for pod in pods:
            (owner,) = pod["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["uid"]) == ("Deployment", dep["metadata"]["uid"])
            assert pod["metadata"]["labels"]["app"] == "edge-web"  # the selector matches
        agents = await eventually(lambda: _count(kube, "edge-agent", 3), "3 daemon pods")
        assert sorted(p["spec"]["nodeName"] for p in agents) == ["e0", "e1", "e2"]
        assert await pods_of(kube, "cloud-web") == []  # left to a real cluster's scheduler

        await make_ready(kube, pods)

        async def deployment_status() -> bool:
            status = (await kube.get(DEPLOYMENTS, "edge-web", NS)).get("status") or {}
            return status.get("readyReplicas") == 3 and status.get("replicas") == 3

        await eventually(deployment_status, "Deployment status readyReplicas=3")
        # A newly joined edge node gets the DaemonSet's pod.
        await add_node(kube, "e3", dict(edge, site="a"))
        agents = await eventually(lambda: _count(kube, "edge-agent", 4), "4 daemon pods")
        assert "e3" in {p["spec"]["nodeName"] for p in agents}
    finally:
        await stop(task)


async def test_explain_reads_the_cluster(kube: KubeClient) -> None:
    from click.testing import CliRunner

    from cloudhub.placement.cli import placement

    await add_node(kube, "n0", {"site": "a"})
    await add_node(kube, "n1", {"zone": "x"})
    _, task = await start(kube)
    try:
        await kube.create(
            EDGEPLACEMENTS,
            edge_placement(
                "web", {"template": template(), "replicas": 1, "groups": {"byLabel": "site"}}
            ),
            NS,
        )
        await eventually(lambda: _count(kube, "web", 1), "1 pod of web")
    finally:
        await stop(task)
    result = await asyncio.to_thread(
        CliRunner().invoke, placement, ["explain", "web", "--kubeconfig", KUBECONFIG[0]]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("n0: chosen (1 replica)")
    assert lines[1] == "n1: rejected: no label site: in no group"
