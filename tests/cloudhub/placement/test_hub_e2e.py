"""Placement through the real hub, end to end.

The hub runs on its own embedded API with the placement extension installed as
``cloudhub serve`` installs it; simulated agents speak the real protocol over loopback
WebSocket and QUIC with node certificates from a test CA; the placement is the Karmada
tutorial's PropagationPolicy (tests/data, byte for byte from upstream) translated by the
importer. Nothing is mocked: pods are created by the controller, streamed to the agents by
the hub, reported Running by the agents, written back by the hub, counted in the
placement's status; failover is driven by a real link going down.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import pathlib
import signal
import sys
import time
from collections import Counter
from typing import Any

import pytest

from cloudhub.errors import KubeAPIError, KubeConflict
from cloudhub.kube import CRDS, DAEMONSETS, NAMESPACES, NODES, PODS, Informer, KubeClient
from cloudhub.placement import LABEL_GROUP, LABEL_PLACEMENT, LABEL_TEMPLATE_HASH
from cloudhub.placement.controller import EDGEPLACEMENTS
from cloudhub.placement.importers import GROUP_LABEL, import_files
from cloudhub.settings import load_hub_settings
from protocol.errors import SettingsError
from tests.cloudhub.placement.conftest import PlacementHub, eventually
from tests.data import MANIFESTS
from tests.sim import SimAgent

KARMADA_PROBE = (
    MANIFESTS / "karmada-io/website/docs/resources/tutorials/rollout/progressive/base/"
    "http-probe-app.yaml"
)
EDGEMESH_DS = MANIFESTS / "kubeedge/edgemesh/build/agent/resources/05-daemonset.yaml"
REPO = pathlib.Path(__file__).resolve().parents[3]
CLUSTERS = ("member1", "member2", "member3")
NAME = "http-probe-app"

pytestmark = pytest.mark.skipif(
    not MANIFESTS.is_dir(), reason=f"shared manifests not found at {MANIFESTS}"
)


def imported_placement(namespace: str, **spec: Any) -> dict[str, Any]:
    """The Karmada tutorial's policy and Deployment, imported; ``spec`` keys set on top
    (the variants a test needs are derived here, the file stays as upstream has it)."""
    (result,) = [r for r in import_files([KARMADA_PROBE]) if r.kind == "PropagationPolicy"]
    (obj,) = result.placements
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    obj["spec"].update(spec)
    return obj


def live_pods(items: list[dict[str, Any]], owner: str = NAME) -> list[dict[str, Any]]:
    return [
        p
        for p in items
        if (p["metadata"].get("labels") or {}).get(LABEL_PLACEMENT) == owner
        and not p["metadata"].get("deletionTimestamp")
    ]


async def pods_of(kube: KubeClient, namespace: str, owner: str = NAME) -> list[dict[str, Any]]:
    items, _ = await kube.list(PODS, namespace)
    return live_pods(items, owner)


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def start_fleet(h: PlacementHub, per_cluster: int = 2) -> dict[str, SimAgent]:
    """Two agents per Karmada member cluster (the group label the importer chose), one
    over QUIC, one over WebSocket; and one node in no member cluster. Returns once the
    placement controller knows every node online with its capacity: a placement created
    earlier would be placed on the nodes that were there (correctly), and healthy
    replicas do not move when more nodes join."""
    agents = {}
    for cluster in CLUSTERS:
        for i in range(per_cluster):
            name = f"{cluster}-n{i}"
            agents[name] = h.agent(
                name, {GROUP_LABEL: cluster}, transport="quic" if i % 2 else "websocket"
            )
    agents["stray-n0"] = h.agent("stray-n0", {GROUP_LABEL: "member9"})
    await fleet_known(h, set(agents))
    return agents


async def fleet_known(h: PlacementHub, names: set[str]) -> None:
    """Until the controller's planner has every one of ``names`` online with capacity."""
    assert h.extension is not None and h.extension.controller is not None
    planner = h.extension.controller.planner

    async def known() -> bool:
        views = {v.name: v for v in planner.node_views()}
        return all(
            n in views and views[n].offline_since is None and views[n].free.cpu > 0 for n in names
        )

    await eventually(known, f"the controller to know nodes {sorted(names)}")


async def placement_status(kube: KubeClient, namespace: str, name: str = NAME) -> dict:
    return (await kube.get(EDGEPLACEMENTS, name, namespace)).get("status") or {}


async def wait_running(h: PlacementHub, namespace: str, count: int) -> list[dict[str, Any]]:
    """Until ``count`` pods are placed, held by their agents and Ready in the API, and the
    placement's status says so."""
    assert h.kube is not None
    kube = h.kube

    last: dict[str, Any] = {}

    async def running() -> list[dict[str, Any]] | None:
        pods = await pods_of(kube, namespace)
        status = await placement_status(kube, namespace)
        last["pods"] = [(p["metadata"]["name"], p["spec"]["nodeName"], is_ready(p)) for p in pods]
        last["status"] = status
        last["held"] = {n: len(a.store) for n, a in h.agents.items()}
        if len(pods) != count or not all(is_ready(p) for p in pods):
            return None
        for pod in pods:
            agent = h.agents[pod["spec"]["nodeName"]]
            if agent.holds("Pod", namespace, pod["metadata"]["name"]) is None:
                return None
        if (status.get("ready"), status.get("placed"), status.get("updated")) != (count,) * 3:
            return None
        return pods

    return await eventually(running, f"{count} pods Running on their agents", state=lambda: last)


async def test_imported_policy_runs_on_agents_and_fails_over(placement_hub: PlacementHub) -> None:
    h = placement_hub
    hub = await h.start()
    kube = h.kube
    assert kube is not None
    crd = await kube.get(CRDS, "edgeplacements.apps.edgefleet.io")  # installed by the hub
    assert crd["spec"]["names"]["kind"] == "EdgePlacement"
    ns = await h.namespace("shop")
    await start_fleet(h)
    # A 2 s tolerance instead of the default 300 s, so that the test sees the failover.
    created = await kube.create(
        EDGEPLACEMENTS, imported_placement(ns, offlineTolerationSeconds=2), ns
    )

    pods = await wait_running(h, ns, 6)
    by_node = Counter(p["spec"]["nodeName"] for p in pods)
    # Karmada "Divided" without weights: even over the three member clusters, and inside
    # each cluster one replica per node; the node in no member cluster gets nothing.
    assert by_node == {f"{c}-n{i}": 1 for c in CLUSTERS for i in range(2)}
    assert Counter(p["metadata"]["labels"][LABEL_GROUP] for p in pods) == dict.fromkeys(CLUSTERS, 2)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["uid"] == created["metadata"]["uid"]
        assert pod["status"]["phase"] == "Running"  # reported by the agent, written by the hub
        tolerations = {t["key"] for t in pod["spec"]["tolerations"]}
        assert {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"} <= tolerations
    assert h.agents["stray-n0"].holds("Pod", ns, pods[0]["metadata"]["name"]) is None
    status = await placement_status(kube, ns)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Placed"]["status"] == "True"
    assert conditions["Available"]["status"] == "True"
    assert conditions["SpecValid"]["status"] == "True"
    assert {g["name"]: g["ready"] for g in status["groups"]} == dict.fromkeys(CLUSTERS, 2)

    # The link of member1-n0 goes down (no close: a lost network) and the agent stays
    # away. The hub sees the session end; 2 s later its replica is replaced on the other
    # node of member1; the lost pod stays while its node is away.
    lost_node = "member1-n0"
    (lost,) = [p for p in pods if p["spec"]["nodeName"] == lost_node]
    away = h.agents[lost_node]
    away.abandon()
    cut_at = time.monotonic()
    away.cut()

    async def replaced() -> list[dict[str, Any]] | None:
        now = await pods_of(kube, ns)
        return now if len(now) == 7 else None

    after = await eventually(replaced, "a replacement for the lost replica")
    reaction_s = time.monotonic() - cut_at
    (new,) = [p for p in after if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in pods}]
    assert new["spec"]["nodeName"] == "member1-n1"
    assert new["metadata"]["labels"][LABEL_GROUP] == "member1"
    assert lost["metadata"]["name"] in {p["metadata"]["name"] for p in after}
    # Not before the tolerance (counted from the moment the session ended).
    assert reaction_s >= 2.0, reaction_s
    print(f"failover through the hub: new pod {reaction_s:.2f} s after the cut (tolerance 2 s)")
    await h.agents["member1-n1"].wait_for(
        lambda: h.agents["member1-n1"].holds("Pod", ns, new["metadata"]["name"]) is not None
    )

    async def six_ready() -> bool:
        status = await placement_status(kube, ns)
        return status.get("ready") == 6

    await eventually(six_ready, "6 Ready again, the replacement counted")

    # The machine comes back with what it held: its pod is now the surplus and goes
    # (the replacement is Ready); no duplicate remains, and no healthy pod was touched.
    back = h.replace_agent(away)
    await back.wait_for(lambda: back.synced, timeout=30)

    async def surplus_gone() -> list[dict[str, Any]] | None:
        items, _ = await kube.list(PODS, ns)
        mine = [p for p in items if p["metadata"]["labels"].get(LABEL_PLACEMENT) == NAME]
        # six left, none of them terminating: the surplus was deleted and finalised
        return mine if len(mine) == 6 == len(live_pods(items)) else None

    final = await eventually(surplus_gone, "the returned surplus pod deleted and finalised")
    names = {p["metadata"]["name"] for p in final}
    assert lost["metadata"]["name"] not in names
    assert {p["metadata"]["name"] for p in pods} - {lost["metadata"]["name"]} < names
    assert Counter(p["metadata"]["labels"][LABEL_GROUP] for p in final) == dict.fromkeys(
        CLUSTERS, 2
    )
    await back.wait_for(lambda: back.holds("Pod", ns, lost["metadata"]["name"]) is None)
    assert hub.quic_port  # both transports were served


async def test_hub_restart_moves_nothing_and_counts_the_absent_from_the_start(
    placement_hub: PlacementHub,
) -> None:
    h = placement_hub
    await h.start()
    assert h.kube is not None
    ns = await h.namespace("restart")
    await start_fleet(h)
    await h.kube.create(EDGEPLACEMENTS, imported_placement(ns, offlineTolerationSeconds=3), ns)
    before = await wait_running(h, ns, 6)
    # member2-n0 will not come back after the restart; the others reconnect by themselves.
    gone = h.agents.pop("member2-n0")
    gone.abandon()
    began = time.monotonic()
    await h.restart()
    kube = h.kube
    assert kube is not None

    last: list[Any] = []

    async def replaced() -> list[dict[str, Any]] | None:
        pods = await pods_of(kube, ns)
        last[:] = [(p["spec"]["nodeName"], is_ready(p)) for p in pods]
        return pods if len(pods) == 7 else None

    after = await eventually(replaced, "the absent node's replica replaced", state=lambda: last)
    elapsed = time.monotonic() - began
    # The new hub never saw member2-n0: offline since it started, so no failover before
    # the 3 s tolerance has passed since the restart (its last contact is unknown).
    assert elapsed >= 3.0, elapsed
    (new,) = [
        p for p in after if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in before}
    ]
    assert new["spec"]["nodeName"] == "member2-n1"
    # Nothing else moved: every pod of the reconnected nodes is the one from before.
    assert {p["metadata"]["uid"] for p in before} <= {p["metadata"]["uid"] for p in after}
    await gone.stop()


async def test_a_node_without_a_session_gets_no_replica(placement_hub: PlacementHub) -> None:
    # A Node that says Ready (fresh heartbeat) but has no session with the hub: the hub's
    # word wins over the Node's, nothing is placed there.
    h = placement_hub
    await h.start()
    kube = h.kube
    assert kube is not None
    ns = await h.namespace("ghost")
    h.agent("member1-n0", {GROUP_LABEL: "member1"})
    labels = {GROUP_LABEL: "member1", "node-role.kubernetes.io/edge": ""}
    await kube.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost", "labels": labels}}
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now}
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    await kube.patch(
        NODES,
        "ghost",
        {"status": {"conditions": [ready], "allocatable": alloc, "capacity": alloc}},
        subresource="status",
    )
    await kube.create(EDGEPLACEMENTS, imported_placement(ns, replicas=2), ns)
    pods = await wait_running(h, ns, 2)
    assert {p["spec"]["nodeName"] for p in pods} == {"member1-n0"}


async def test_rolling_update_through_agents_keeps_the_budget(placement_hub: PlacementHub) -> None:
    h = placement_hub
    await h.start()
    kube = h.kube
    assert kube is not None
    ns = await h.namespace("rollout")
    await start_fleet(h)
    await kube.create(EDGEPLACEMENTS, imported_placement(ns), ns)
    before = await wait_running(h, ns, 6)
    old_hash = before[0]["metadata"]["labels"][LABEL_TEMPLATE_HASH]

    # Every pod event, checked as it happens: per member cluster never more than
    # desired + maxSurge (2 + 1) pods and never fewer than desired - maxUnavailable
    # (2 - 0) Ready ones (the tutorial's updateStrategy).
    violations: list[str] = []
    peak: Counter[str] = Counter()
    watch = Informer(kube, PODS, namespace=ns)

    def check(kind: str, obj: dict, old: dict | None) -> None:
        if not watch.synced.is_set():
            return  # the initial list is still filling the cache
        groups: dict[str, list[dict]] = {c: [] for c in CLUSTERS}
        for pod in live_pods(watch.items()):
            groups[pod["metadata"]["labels"][LABEL_GROUP]].append(pod)
        for group, members in groups.items():
            peak[group] = max(peak[group], len(members))
            ready = sum(1 for p in members if is_ready(p))
            if len(members) > 3:
                violations.append(f"{group}: {len(members)} pods")
            if ready < 2:
                violations.append(f"{group}: {ready} Ready")

    watch.add_handler(check)
    task = asyncio.create_task(watch.run())
    try:
        await watch.wait_synced(30)
        check("SYNCED", {}, None)
        current = await kube.get(EDGEPLACEMENTS, NAME, ns)
        env = current["spec"]["template"]["spec"]["containers"][0]["env"]
        env[0]["value"] = "v2"  # the tutorial's next rollout step
        await kube.replace(EDGEPLACEMENTS, current)

        async def rolled() -> list[dict[str, Any]] | None:
            pods = await wait_running(h, ns, 6)
            hashes = {p["metadata"]["labels"][LABEL_TEMPLATE_HASH] for p in pods}
            if old_hash in hashes or len(hashes) != 1:
                return None
            items, _ = await kube.list(PODS, ns)
            return pods if len(items) == 6 else None  # the old ones finalised too

        after = await eventually(rolled, "every pod replaced by the v2 template")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert violations == [], violations
    assert peak == dict.fromkeys(CLUSTERS, 3)  # the surge was used, one at a time
    for pod in after:
        assert pod["spec"]["containers"][0]["env"][0] == {"name": "ROLLOUT_LABEL", "value": "v2"}
        agent = h.agents[pod["spec"]["nodeName"]]
        held = agent.holds("Pod", ns, pod["metadata"]["name"])
        assert held is not None and held["spec"]["containers"][0]["env"][0]["value"] == "v2"
    for old in before:  # every agent drops its old pod (the delete follows the API's)
        agent = h.agents[old["spec"]["nodeName"]]
        await agent.wait_for(
            lambda a=agent, o=old: a.holds("Pod", ns, o["metadata"]["name"]) is None
        )
    status = await placement_status(kube, ns)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Updated"]["status"] == "True"


async def test_invalid_placement_is_reported_and_breaks_nothing(
    placement_hub: PlacementHub,
) -> None:
    h = placement_hub
    await h.start()
    kube = h.kube
    assert kube is not None
    ns = await h.namespace("mixed")
    await start_fleet(h, per_cluster=1)
    await kube.create(EDGEPLACEMENTS, imported_placement(ns, replicas=3), ns)
    good = await wait_running(h, ns, 3)

    # An override naming a container the template does not have: the API accepts it
    # (the CRD has no CEL rules), the controller refuses it.
    bad = imported_placement(
        ns, overrides=[{"group": "member1", "container": "nope", "image": "x:1"}]
    )
    bad["metadata"]["name"] = "broken"
    await kube.create(EDGEPLACEMENTS, bad, ns)

    async def reported() -> dict | None:
        status = await placement_status(kube, ns, "broken")
        for condition in status.get("conditions") or []:
            if condition["type"] == "SpecValid" and condition["status"] == "False":
                return condition
        return None

    condition = await eventually(reported, "SpecValid=False on the broken placement")
    assert "spec.overrides[0].container" in condition["message"]
    assert "nope" in condition["message"]
    assert await pods_of(kube, ns, "broken") == []

    # The good placement is untouched and the controller still acts on it.
    assert {p["metadata"]["uid"] for p in await pods_of(kube, ns)} == {
        p["metadata"]["uid"] for p in good
    }
    current = await kube.get(EDGEPLACEMENTS, NAME, ns)
    current["spec"]["replicas"] = 4
    await kube.replace(EDGEPLACEMENTS, current)
    await wait_running(h, ns, 4)
    # Fixed, the broken one is placed too.
    fixed = await kube.get(EDGEPLACEMENTS, "broken", ns)
    fixed["spec"]["overrides"][0]["container"] = NAME
    await kube.replace(EDGEPLACEMENTS, fixed)

    async def placed() -> list[dict[str, Any]] | None:
        pods = await pods_of(kube, ns, "broken")
        return pods if len(pods) == 6 else None

    pods = await eventually(placed, "the fixed placement's 6 pods")
    images = {
        p["metadata"]["labels"][LABEL_GROUP]: p["spec"]["containers"][0]["image"] for p in pods
    }
    assert images["member1"] == "x:1" and images["member2"].startswith("ghcr.io/")
    status = await placement_status(kube, ns, "broken")
    spec_valid = [c for c in status["conditions"] if c["type"] == "SpecValid"]
    assert spec_valid[0]["status"] == "True"


async def test_daemonset_manifest_lands_on_every_edge_agent(placement_hub: PlacementHub) -> None:
    # On the embedded API (no kube-scheduler) the hub places standard workloads that
    # target edge nodes: KubeEdge's own edgemesh-agent DaemonSet, as upstream ships it.
    import yaml

    h = placement_hub
    await h.start()
    kube = h.kube
    assert kube is not None
    ns = await h.namespace("kubeedge")
    (ds,) = [d for d in yaml.safe_load_all(EDGEMESH_DS.read_text()) if d]
    ds["metadata"]["namespace"] = ns
    ds["spec"]["template"]["spec"]["nodeSelector"] = {"node-role.kubernetes.io/edge": ""}
    agents = [h.agent(f"edge-{i}", {"site": "a"}) for i in range(3)]
    await kube.create(DAEMONSETS, ds, ns)

    async def everywhere() -> bool:
        items, _ = await kube.list(PODS, ns)
        return (
            all(any(a.holds("Pod", ns, p["metadata"]["name"]) for p in items) for a in agents)
            and len(items) == 3
        )

    await eventually(everywhere, "one edgemesh-agent pod on each agent")
    items, _ = await kube.list(PODS, ns)
    assert sorted(p["spec"]["nodeName"] for p in items) == ["edge-0", "edge-1", "edge-2"]


async def test_placement_disabled_installs_nothing(placement_hub: PlacementHub) -> None:
    from cloudhub.errors import KubeNotFound

    h = placement_hub
    await h.start(**{"placement.enabled": "false"})
    assert h.extension is not None and h.extension.controller is None
    assert h.kube is not None
    with pytest.raises(KubeNotFound):
        await h.kube.get(CRDS, "edgeplacements.apps.edgefleet.io")


def test_placement_settings_are_checked_and_named() -> None:
    settings = load_hub_settings(
        environ={"CLOUDHUB_PLACEMENT__NAMESPACE": "factory"},
        overrides={"placement.place_workloads": "off"},
    )
    assert settings.placement.namespace == "factory"
    assert settings.placement.enabled is True  # on by default
    assert not settings.placement.places_workloads(embedded_api=True)
    assert load_hub_settings().placement.places_workloads(embedded_api=True)
    assert not load_hub_settings().placement.places_workloads(embedded_api=False)
    for key, value in (
        ("placement.namespace", "Not_A_Namespace"),
        ("placement.writes_per_second", "0"),
        ("placement.place_workloads", "sometimes"),
        ("placement.settle", "-1"),
    ):
        with pytest.raises(SettingsError, match=key.split(".")[1]):
            load_hub_settings(overrides={key: value})


async def test_cloudhub_serve_runs_placement(tmp_path: pathlib.Path) -> None:
    # The real command: `cloudhub serve` on its embedded API installs the CRD and places.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    data = tmp_path / "api"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cloudhub",
        "serve",
        *("--kube-embedded-data-dir", str(data), "--kube-embedded-port", "0"),
        *("--listen-quic-host", "127.0.0.1", "--listen-quic-port", "0"),
        *("--listen-websocket-host", "127.0.0.1", "--listen-websocket-port", "0"),
        *("--pki-join-host", "127.0.0.1", "--pki-join-port", "0"),
        *("--observability-http-host", "127.0.0.1", "--observability-http-port", "0"),
        *("--observability-log-format", "text", "--placement-namespace", "factory"),
        env=env,
        cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    kube: KubeClient | None = None
    try:

        async def api_up() -> bool:
            return (data / "kubeconfig").exists() or proc.returncode is not None

        await eventually(api_up, "the embedded API's kubeconfig")
        assert proc.returncode is None
        kube = await KubeClient.from_kubeconfig(str(data / "kubeconfig"))

        async def crd() -> bool:
            try:
                await kube.list(EDGEPLACEMENTS, "factory")
            except KubeAPIError:
                return False
            return True

        await eventually(crd, "the EdgePlacement CRD served")
        for ns in ("factory", "elsewhere"):
            await kube.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
            await kube.create(EDGEPLACEMENTS, imported_placement(ns), ns)

        async def no_nodes() -> dict | None:
            status = await placement_status(kube, "factory")
            placed = [c for c in status.get("conditions") or [] if c["type"] == "Placed"]
            return placed[0] if placed else None

        condition = await eventually(no_nodes, "the placement's status")
        assert (condition["status"], condition["reason"]) == ("False", "NoEligibleNodes")
        # placement.namespace=factory: the other namespace's placement is not handled.
        assert await placement_status(kube, "elsewhere") == {}
    finally:
        if kube is not None:
            await kube.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert b"placement controller started (namespace factory" in stderr


@pytest.mark.kubeapiserver
async def test_on_a_real_kube_apiserver(placement_hub: PlacementHub, kube_apiserver) -> None:
    # kube-apiserver 1.20 (no scheduler, no controllers): the hub bridges to it through a
    # kubeconfig; the operator applied the CRD from deploy/crds (the hub does not); the
    # Deployments and DaemonSets are left to the cluster (place_workloads=auto).
    import uuid

    import yaml

    from cloudhub.kube import DEPLOYMENTS

    run = uuid.uuid4().hex[:6]
    admin = await KubeClient.from_kubeconfig(str(kube_apiserver.kubeconfig))
    try:
        crd = yaml.safe_load(
            (REPO / "deploy/crds/edgeplacements.apps.edgefleet.io.yaml").read_text()
        )
        with contextlib.suppress(KubeConflict):
            await admin.create(CRDS, crd)  # as the operator applies deploy/crds
    finally:
        await admin.close()
    ns = f"pl-{run}"
    h = placement_hub
    await h.start(**{"kube.kubeconfig": str(kube_apiserver.kubeconfig), "placement.namespace": ns})
    kube = h.kube
    assert kube is not None
    assert h.extension is not None and h.extension.controller is not None
    assert not h.extension.controller.settings.place_workloads
    await h.namespace(ns)
    for cluster in CLUSTERS:
        name = f"{cluster}-{run}"
        h.agent(name, {GROUP_LABEL: cluster, "run": run})
    await fleet_known(h, {f"{c}-{run}" for c in CLUSTERS})
    placement = imported_placement(ns, replicas=3, nodeSelector={"matchLabels": {"run": run}})

    async def served() -> bool:
        try:
            await kube.create(EDGEPLACEMENTS, placement, ns)
        except KubeAPIError:
            return False
        return True

    await eventually(served, "the EdgePlacement CRD served")
    pods = await wait_running(h, ns, 3)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(f"{c}-{run}" for c in CLUSTERS)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "edge-web", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "edge-web"}},
            "template": {
                "metadata": {"labels": {"app": "edge-web"}},
                "spec": {
                    "nodeSelector": {"node-role.kubernetes.io/edge": ""},
                    "containers": [{"name": "web", "image": "web:1"}],
                },
            },
        },
    }
    await kube.create(DEPLOYMENTS, deployment, ns)
    await kube.patch(EDGEPLACEMENTS, NAME, {"spec": {"replicas": 4}}, ns)  # a later change
    await wait_running(h, ns, 4)
    assert await pods_of(kube, ns, "edge-web") == []  # the cluster's controllers own it
