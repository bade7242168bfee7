"""Workloads on the embedded API run as Kubernetes would run them (issue 15 items 6 and 8).

Item 8: upstream KubeEdge manifests, as shipped (tests/data), with no edge nodeSelector or
pinned by a template ``nodeName``, were silently never run (0 pods, empty status, no
Event). Kubernetes semantics: a selector-less DaemonSet runs on every eligible node, a
template ``nodeName`` binds, and what cannot be placed says so on the workload's status
and in an Event.

Item 6: a pod the agent refuses (``UnsupportedPodSpec``: edgemesh-agent is privileged) was
deleted and recreated ~20 times a second. Now each new replica on that node waits longer
(back-off, as the DaemonSet controller's), and the workload's status and one Warning Event
say why. With a real ``edgeagent run`` (process runtime: it refuses before any engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import time
from typing import Any

import pytest
import yaml

from cloudhub.kube import DAEMONSETS, DEPLOYMENTS, EVENTS, PODS, KubeClient
from tests.cloudhub.placement.conftest import PlacementHub, eventually
from tests.data import MANIFESTS
from tests.edgeagent.hublink.fleet import AgentProcess, free_port

KUBEEDGE = MANIFESTS / "kubeedge"
EDGEMESH_DS = KUBEEDGE / "edgemesh/build/agent/resources/05-daemonset.yaml"
COUNTER_MAPPER = KUBEEDGE / "examples/new-counter-demo/virtualprotocol/resource/deployment.yaml"
ONVIF_MAPPER = (
    KUBEEDGE / "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/deployment.yaml"
)


def upstream(path, kind: str, namespace: str) -> dict[str, Any]:
    """The one ``kind`` document of an upstream file, as shipped, in ``namespace``."""
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == kind]
    doc["metadata"]["namespace"] = namespace
    return doc


def condition(obj: dict, type_: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return {}


async def pods_in(kube: KubeClient, ns: str) -> list[dict]:
    items, _ = await kube.list(PODS, ns)
    return items


async def test_a_selector_less_daemonset_runs_on_every_edge_node(
    placement_hub: PlacementHub,
) -> None:
    h = placement_hub
    await h.start()
    kube = h.kube
    assert kube is not None
    ns = await h.namespace("kubeedge")
    agents = [h.agent(f"edge-{i}", {"site": "a"}) for i in range(3)]
    ds = upstream(EDGEMESH_DS, "DaemonSet", ns)
    assert "nodeSelector" not in ds["spec"]["template"]["spec"]  # as upstream ships it
    await kube.create(DAEMONSETS, ds, ns)

    async def everywhere() -> bool:
        items = await pods_in(kube, ns)
        held = all(any(a.holds("Pod", ns, p["metadata"]["name"]) for p in items) for a in agents)
        return held and len(items) == 3

    await eventually(everywhere, "one edgemesh-agent pod on each agent")
    assert sorted(p["spec"]["nodeName"] for p in await pods_in(kube, ns)) == [
        "edge-0",
        "edge-1",
        "edge-2",
    ]

    async def counted() -> dict:
        got = await kube.get(DAEMONSETS, "edgemesh-agent", ns)
        status = got.get("status") or {}
        return got if status.get("numberReady") == 3 else {}

    got = await eventually(counted, "the DaemonSet status counting 3 ready")
    assert got["status"]["desiredNumberScheduled"] == 3
    assert condition(got, "ReplicaFailure")["status"] == "False"


async def test_a_template_node_name_binds_and_a_missing_node_is_said(
    placement_hub: PlacementHub,
) -> None:
    h = placement_hub
    await h.start()
    kube = h.kube
    assert kube is not None
    ns = await h.namespace("mappers")
    h.agent("kind-worker", {"site": "a"})  # the node upstream's manifest names
    h.agent("edge-other", {"site": "a"})
    await kube.create(DEPLOYMENTS, upstream(COUNTER_MAPPER, "Deployment", ns), ns)

    async def bound() -> list[dict]:
        items = await pods_in(kube, ns)
        return items if len(items) == 1 else []

    (pod,) = await eventually(bound, "the counter-mapper pod")
    assert pod["spec"]["nodeName"] == "kind-worker"

    async def delivered() -> bool:
        return h.agents["kind-worker"].holds("Pod", ns, pod["metadata"]["name"]) is not None

    await eventually(delivered, "the pod at kind-worker")

    # upstream's onvif mapper names node "edge-node", which does not exist here
    await kube.create(DEPLOYMENTS, upstream(ONVIF_MAPPER, "Deployment", ns), ns)

    async def said() -> dict:
        got = await kube.get(DEPLOYMENTS, "mapper-test", ns)
        return got if condition(got, "ReplicaFailure").get("status") == "True" else {}

    got = await eventually(said, "the Deployment's status saying why nothing runs")
    failure = condition(got, "ReplicaFailure")
    assert failure["reason"] == "NoEligibleNodes", failure
    assert "nodeName edge-node" in failure["message"] and "no such node" in failure["message"]
    assert got["status"]["replicas"] == 0

    async def warned() -> list[dict]:
        items, _ = await kube.list(
            EVENTS,
            ns,
            field_selector="involvedObject.kind=Deployment,involvedObject.name=mapper-test",
        )
        return [e for e in items if e["type"] == "Warning"]

    (event,) = await eventually(warned, "a Warning Event on the Deployment")
    assert event["reason"] == "NoEligibleNodes" and event["message"] == failure["message"]
    assert [p["spec"]["nodeName"] for p in await pods_in(kube, ns)] == ["kind-worker"]


async def test_refused_pods_are_replaced_with_back_off_not_in_a_loop(
    placement_hub: PlacementHub, tmp_path
) -> None:
    h = placement_hub
    port = free_port()
    hub = await h.start(**{"listen.quic_port": port, "listen.websocket_port": port})
    kube = h.kube
    assert kube is not None
    ns = await h.namespace("kubeedge")
    agent = AgentProcess(
        tmp_path / "edge-0", "edge-0", "process", f"quic://127.0.0.1:{port}", h.pki.ca
    )
    agent.start()
    created: list[float] = []
    watcher: asyncio.Task[None] | None = None
    try:

        async def session() -> bool:
            return hub.registry.get("edge-0") is not None

        await eventually(session, "the agent's session")
        _, rv = await kube.list(PODS, ns)

        async def watch() -> None:
            async for kind, _obj in kube.watch(PODS, ns, resource_version=rv):
                if kind == "ADDED":
                    created.append(time.monotonic())

        watcher = asyncio.create_task(watch())
        # edgemesh-agent: privileged, so the agent refuses it (UnsupportedPodSpec). With an
        # edge nodeSelector, so that a hub without item 8's fix places it too.
        ds = upstream(EDGEMESH_DS, "DaemonSet", ns)
        ds["spec"]["template"]["spec"]["nodeSelector"] = {"node-role.kubernetes.io/edge": ""}
        await kube.create(DAEMONSETS, ds, ns)

        def held() -> float:
            value = hub.metrics.registry.get_sample_value(
                "edgefleet_hub_controller_backoffs_total", {"kind": "DaemonSet"}
            )
            return value or 0.0

        async def four() -> bool:
            return len(created) >= 4

        await eventually(four, "four edgemesh-agent pods created, one after the other")
        # Each replacement waited at least half its ceiling (1, 2 s: equal jitter), so four
        # pods took >= 0.5 + 1 + 2 s; the loop made dozens in that time.
        took = created[3] - created[0]
        assert took >= 3.5 - 0.5, f"4 pods in {took:.2f} s, {len(created)} so far: a loop"
        assert held() >= 3 and len(created) <= 5, (held(), len(created))

        async def status() -> dict:
            got = await kube.get(DAEMONSETS, "edgemesh-agent", ns)
            return got if condition(got, "ReplicaFailure").get("reason") == "BackOff" else {}

        got = await eventually(status, "the DaemonSet's status naming the failure")
        message = condition(got, "ReplicaFailure")["message"]
        assert "node edge-0: UnsupportedPodSpec" in message and "securityContext" in message, (
            message
        )

        async def one_warning() -> list[dict]:
            items, _ = await kube.list(
                EVENTS,
                ns,
                field_selector="involvedObject.kind=DaemonSet,involvedObject.name=edgemesh-agent",
            )
            mine = [e for e in items if e["reason"] == "BackOff"]
            return mine if mine and mine[0]["count"] >= 3 else []

        (event,) = await eventually(one_warning, "one BackOff Event counting the failures")
        assert event["type"] == "Warning" and "UnsupportedPodSpec" in event["message"]
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await agent.stop()


@pytest.mark.kubeapiserver
async def test_on_a_real_kube_apiserver_the_hub_writes_a_refused_pod_once(
    kube_apiserver, pki_ca, tmp_path
) -> None:
    # A real cluster runs its own controllers (the reference server has none: the pod is
    # bound by hand, as a controller would bind it). The hub's side of a refused pod must
    # not storm either: one status write, one Event, then nothing while the node lives on.
    import uuid

    from cloudhub.errors import KubeNotFound
    from cloudhub.kube import LEASES, NAMESPACES
    from tests.edgeagent.hublink.fleet import HubRunner

    node = f"edge-real-{uuid.uuid4().hex[:6]}"
    ns = f"refused-{uuid.uuid4().hex[:6]}"
    port = free_port()
    runner = HubRunner(pathlib.Path(kube_apiserver.kubeconfig), pki_ca.server, port)
    hub = await runner.start()
    kube = await KubeClient.from_kubeconfig(str(kube_apiserver.kubeconfig))
    agent = AgentProcess(tmp_path / node, node, "process", runner.url, pki_ca.ca)
    try:
        await kube.create(NAMESPACES, {"metadata": {"name": ns}})
        agent.start()

        async def session() -> bool:
            return hub.registry.get(node) is not None

        await eventually(session, "the agent's session")
        ds = upstream(EDGEMESH_DS, "DaemonSet", ns)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "edgemesh-agent-x", "namespace": ns},
            "spec": {**ds["spec"]["template"]["spec"], "nodeName": node},
        }
        await kube.create(PODS, pod, ns)

        async def refused() -> dict:
            got = await kube.get(PODS, "edgemesh-agent-x", ns)
            status = got.get("status") or {}
            ok = status.get("phase") == "Failed" and status.get("reason") == "UnsupportedPodSpec"
            return got if ok else {}

        failed = await eventually(refused, "the pod Failed: UnsupportedPodSpec")
        rv = failed["metadata"]["resourceVersion"]

        # Let the node live on for five Lease renewals (the hub's own clock: 1 s each).
        renewals: list[str] = []

        async def renewed_five_times() -> bool:
            try:
                lease = await kube.get(LEASES, node, "kube-node-lease")
            except KubeNotFound:  # registration runs in the background
                return False
            stamp = lease["spec"]["renewTime"]
            if not renewals or renewals[-1] != stamp:
                renewals.append(stamp)
            return len(renewals) > 5

        await eventually(renewed_five_times, "five Lease renewals")
        assert (await kube.get(PODS, "edgemesh-agent-x", ns))["metadata"]["resourceVersion"] == rv
        items, _ = await kube.list(
            EVENTS, ns, field_selector="involvedObject.name=edgemesh-agent-x"
        )
        assert [(e["reason"], e.get("count", 1)) for e in items] == [("UnsupportedPodSpec", 1)]
        written = hub.metrics.registry.get_sample_value(
            "edgefleet_hub_pod_status_writes_total", {"result": "written"}
        )
        assert written == 1.0
    finally:
        await agent.stop()
        await kube.close()
        await runner.stop()
