"""A simulated API for planner tests: applies plans and feeds the pods back.

Pods written by a plan appear at once; whether they become Ready is up to the
test (``ready=True`` by default: a pod on an online node turns Ready as soon
as it is written). Deleted pods disappear at once, like a kubelet that stops
them immediately.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime, timezone
from typing import Any

from cloudhub.placement import (
    LABEL_GROUP,
    LABEL_PLACEMENT,
    LABEL_TEMPLATE_HASH,
    Plan,
    Planner,
    parse_placement,
)

T0 = 1_700_000_000.0


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    taints: list[dict] | None = None,
    unschedulable: bool = False,
    extended: dict[str, str] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extended or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": list(taints or []), "unschedulable": unschedulable},
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def template(
    image: str = "registry.local/app:1",
    *,
    cpu: str | None = "100m",
    memory: str | None = "64Mi",
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict] | None = None,
    extra: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    requests.update(extra or {})
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "image": image, "resources": {"requests": requests}},
        ]
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return {"metadata": {"labels": dict(labels or {"app": "demo"})}, "spec": spec}


_uids = itertools.count(1)


def placement_obj(
    name: str,
    spec: dict[str, Any],
    *,
    created: float = T0,
    namespace: str = "default",
    generation: int = 1,
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgePlacement",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}-{next(_uids)}",
            "generation": generation,
            "creationTimestamp": stamp(created),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


class Fleet:
    """Nodes, placements and pods around one Planner, with a clock."""

    def __init__(self, planner: Planner | None = None) -> None:
        self.planner = planner or Planner()
        self.now = T0 + 1000.0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.offline: dict[str, float] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.placements: dict[str, dict[str, Any]] = {}
        self.auto_ready = True
        self.history: list[Plan] = []

    # nodes
    def add_node(self, name: str, labels: dict[str, str] | None = None, **kw: Any) -> None:
        self.nodes[name] = node(name, labels, **kw)
        self.planner.upsert_node(self.nodes[name], offline_since=self.offline.get(name))

    def update_node(self, name: str, **changes: Any) -> None:
        obj = self.nodes[name]
        if "labels" in changes:
            obj["metadata"]["labels"] = changes.pop("labels")
        if "taints" in changes:
            obj["spec"]["taints"] = changes.pop("taints")
        if "unschedulable" in changes:
            obj["spec"]["unschedulable"] = changes.pop("unschedulable")
        assert not changes, changes
        self.planner.upsert_node(obj, offline_since=self.offline.get(name))

    def go_offline(self, name: str) -> None:
        self.offline[name] = self.now
        self.planner.upsert_node(self.nodes[name], offline_since=self.now)

    def come_back(self, name: str) -> None:
        self.offline.pop(name, None)
        self.planner.upsert_node(self.nodes[name], offline_since=None)

    # placements
    def apply(self, name: str, spec: dict[str, Any], **kw: Any) -> None:
        old = self.placements.get(name)
        if old is not None:
            kw.setdefault("uid", old["metadata"]["uid"])
            kw.setdefault("generation", old["metadata"]["generation"] + 1)
            kw.setdefault("created", T0)
        obj = placement_obj(name, spec, **kw)
        self.placements[name] = obj
        self.planner.upsert_placement(parse_placement(obj))

    # pods
    def _materialise(self, pod: dict[str, Any]) -> dict[str, Any]:
        pod["metadata"]["uid"] = f"pod-uid-{next(_uids)}"
        pod["metadata"]["creationTimestamp"] = stamp(self.now)
        online = pod["spec"]["nodeName"] not in self.offline
        ready = self.auto_ready and online
        pod["status"] = {
            "phase": "Running" if online else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        return pod

    def set_ready(self, name: str, ready: bool = True, namespace: str = "default") -> None:
        pod = self.pods[(namespace, name)]
        pod["status"]["phase"] = "Running"
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        self.planner.upsert_pod(pod)

    def step(self, advance: float = 0.0) -> Plan:
        self.now += advance
        plan = self.planner.plan(self.now)
        self.history.append(plan)
        for create in plan.creates:
            pod = self._materialise(create.render())
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            assert key not in self.pods, f"duplicate pod name {key}"
            self.pods[key] = pod
            self.planner.upsert_pod(pod)
        for delete in plan.deletes:
            self.pods.pop((delete.namespace, delete.name), None)
            self.planner.remove_pod(delete.namespace, delete.name)
        return plan

    def converge(self, rounds: int = 10) -> int:
        """Step until a plan writes no pods; returns the number of steps that wrote."""
        for i in range(rounds):
            plan = self.step()
            if not plan.creates and not plan.deletes:
                return i
        raise AssertionError("placement did not converge")

    def pods_of(self, placement: str) -> list[dict[str, Any]]:
        mine = [
            p
            for p in self.pods.values()
            if p["metadata"]["labels"].get(LABEL_PLACEMENT) == placement
        ]
        return sorted(mine, key=lambda p: p["metadata"]["name"])

    def per_node(self, placement: str) -> Counter[str]:
        return Counter(p["spec"]["nodeName"] for p in self.pods_of(placement))

    def per_group(self, placement: str) -> Counter[str]:
        pods = self.pods_of(placement)
        return Counter(p["metadata"]["labels"].get(LABEL_GROUP, "") for p in pods)

    def hashes(self, placement: str) -> Counter[str]:
        pods = self.pods_of(placement)
        return Counter(p["metadata"]["labels"][LABEL_TEMPLATE_HASH] for p in pods)
