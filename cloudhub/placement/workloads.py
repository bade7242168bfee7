"""apps/v1 Deployments and DaemonSets as placements (for the embedded API).

The embedded API has no kube-scheduler and no controller-manager, so a
standard Deployment or DaemonSet whose pod template targets edge nodes would
never get pods. The placement controller places them itself: a Deployment
becomes a Replicas placement, a DaemonSet a PerNode placement, with the
template, replica count and update strategy of the workload; the pods are
owned by the workload. In a real cluster these are left to Kubernetes.

On the embedded API every Deployment and DaemonSet is placed (nothing else would run
it: a selector-less DaemonSet runs on every eligible node, a template ``nodeName`` binds,
as in Kubernetes); with ``place_workloads: on`` on a real cluster only those whose
template targets edge nodes: its ``nodeSelector`` has the key
``node-role.kubernetes.io/edge`` or its required node affinity tests that key
(``In`` or ``Exists``).

Their status (:func:`workload_status`) is the workload kind's own counts plus two
conditions: ``Available`` (from the placement's) and ``ReplicaFailure`` (Deployment's
condition type, used for DaemonSets too): ``True`` when replicas could not be placed (no
eligible node, capacity: the placement's ``Placed`` reason and message) or keep failing
on their node (reason ``BackOff``, :mod:`cloudhub.placement.failures`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.model import (
    ANNOTATION_REBALANCE,
    OwnerRef,
    Placement,
    PlacementKey,
    parse_metadata,
    parse_spec,
)

if TYPE_CHECKING:
    from cloudhub.placement.failures import Failure
    from cloudhub.placement.plan import PlacementStatus

__all__ = [
    "EDGE_ROLE_LABEL",
    "deployment_strategy",
    "failing_condition",
    "placement_from_workload",
    "targets_edge",
    "workload_spec",
    "workload_status",
]

EDGE_ROLE_LABEL = "node-role.kubernetes.io/edge"
"""The node label that marks edge nodes (KubeEdge's and OpenYurt's convention)."""


def targets_edge(template: Mapping[str, Any]) -> bool:
    """Whether a pod template asks for edge nodes (see the module docstring)."""
    spec = template.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping) and EDGE_ROLE_LABEL in selector:
        return True
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expr in (term or {}).get("matchExpressions") or []:
            if expr.get("key") == EDGE_ROLE_LABEL and expr.get("operator") in ("In", "Exists"):
                return True
    return False


def deployment_strategy(strategy: object, *, kind: str = "Deployment") -> dict[str, Any]:
    """The EdgePlacement ``updateStrategy`` for a Deployment's or DaemonSet's strategy.

    Deployment ``Recreate`` becomes ``maxUnavailable: 100%, maxSurge: 0``;
    RollingUpdate keeps its numbers (Deployment defaults 25%/25%, DaemonSet
    defaults 1/0, as the API defaults them).
    """
    defaults = (
        {"maxUnavailable": "25%", "maxSurge": "25%"}
        if kind == "Deployment"
        else {
            "maxUnavailable": 1,
            "maxSurge": 0,
        }
    )
    if not isinstance(strategy, Mapping):
        return defaults
    if strategy.get("type") == "Recreate":
        return {"maxUnavailable": "100%", "maxSurge": 0}
    rolling = strategy.get("rollingUpdate") or {}
    out = dict(defaults)
    for key in ("maxUnavailable", "maxSurge"):
        if rolling.get(key) is not None:
            out[key] = rolling[key]
    if out["maxUnavailable"] in (0, "0%") and out["maxSurge"] in (0, "0%"):
        out["maxUnavailable"] = 1
    return out


def workload_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The EdgePlacement spec JSON equivalent to a Deployment or DaemonSet.

    Raises:
        InvalidSpec: the object is not an apps/v1 Deployment or DaemonSet, or
            has no pod template.
    """
    kind = obj.get("kind")
    if kind not in ("Deployment", "DaemonSet"):
        raise InvalidSpec("kind", f"expected Deployment or DaemonSet, got {kind!r}")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("template"), Mapping):
        raise InvalidSpec("spec.template", "is required")
    template = {
        "metadata": {
            k: v
            for k, v in (spec["template"].get("metadata") or {}).items()
            if k in ("labels", "annotations")
        },
        "spec": spec["template"].get("spec") or {},
    }
    out: dict[str, Any] = {"template": template}
    if kind == "Deployment":
        replicas = spec.get("replicas")
        out["replicas"] = 1 if replicas is None else replicas
        out["updateStrategy"] = deployment_strategy(spec.get("strategy"))
    else:
        out["mode"] = "PerNode"
        out["updateStrategy"] = deployment_strategy(spec.get("updateStrategy"), kind="DaemonSet")
    return out


def placement_from_workload(obj: Mapping[str, Any]) -> Placement:
    """Translate a Deployment or DaemonSet into an internal placement.

    The pods are owned by the workload (``apps/v1`` ownerReference), carry its
    template's labels (so its selector matches) and the placement labels.

    Raises:
        InvalidSpec: the workload is malformed (the path names the field, as
            for an EdgePlacement).
    """
    kind = str(obj.get("kind"))
    namespace, name, uid, generation, created, annotations = parse_metadata(obj, kind)
    spec = parse_spec(workload_spec(obj))
    return Placement(
        key=PlacementKey(kind, namespace, name),
        uid=uid,
        generation=generation,
        created=created,
        spec=spec,
        owner=OwnerRef("apps/v1", kind, name, uid),
        rebalance=str(annotations.get(ANNOTATION_REBALANCE, "")),
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def failing_condition(failures: Sequence[Failure]) -> dict[str, Any] | None:
    """``ReplicaFailure=True`` (reason ``BackOff``) naming the nodes whose replicas keep
    failing and why, or ``None`` when none do."""
    if not failures:
        return None
    shown = "; ".join(
        f"node {f.node}: {f.reason}: {f.message} ({f.count} failed, next in {f.delay:.0f} s)"
        for f in failures[:5]
    )
    more = f"; and {len(failures) - 5} more nodes" if len(failures) > 5 else ""
    return {
        "type": "ReplicaFailure",
        "status": "True",
        "reason": "BackOff",
        "message": f"replicas keep failing, replaced with back-off: {shown}{more}",
        "lastTransitionTime": _now(),
    }


def workload_status(
    kind: str, status: PlacementStatus, failures: Sequence[Failure]
) -> dict[str, Any]:
    """The ``status`` of a placed Deployment or DaemonSet (see the module docstring)."""
    if kind == "Deployment":
        body: dict[str, Any] = {
            "observedGeneration": status.observed_generation,
            "replicas": status.placed,
            "updatedReplicas": status.updated,
            "readyReplicas": status.ready,
            "availableReplicas": status.ready,
            "unavailableReplicas": max(status.desired - status.ready, 0),
        }
    else:
        body = {
            "observedGeneration": status.observed_generation,
            "desiredNumberScheduled": status.desired,
            "currentNumberScheduled": status.placed,
            "numberMisscheduled": 0,
            "numberReady": status.ready,
            "updatedNumberScheduled": status.updated,
            "numberAvailable": status.ready,
            "numberUnavailable": max(status.desired - status.ready, 0),
        }
    conditions = []
    available = status.condition("Available")
    if available is not None:
        conditions.append(available.to_json())
    failing = failing_condition(failures)
    placed = status.condition("Placed")
    if failing is not None:
        conditions.append(failing)
    elif placed is not None and placed.status == "False":
        conditions.append({**placed.to_json(), "type": "ReplicaFailure", "status": "True"})
    else:
        conditions.append(
            {
                "type": "ReplicaFailure",
                "status": "False",
                "reason": "AllPlaced",
                "message": "every replica is placed and none is failing",
                "lastTransitionTime": (placed.to_json() if placed else {}).get(
                    "lastTransitionTime", _now()
                ),
            }
        )
    body["conditions"] = conditions
    return body
