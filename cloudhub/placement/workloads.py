"""apps/v1 Deployments and DaemonSets as placements (for the embedded API).

The embedded API has no kube-scheduler and no controller-manager, so a
standard Deployment or DaemonSet whose pod template targets edge nodes would
never get pods. The placement controller places them itself: a Deployment
becomes a Replicas placement, a DaemonSet a PerNode placement, with the
template, replica count and update strategy of the workload; the pods are
owned by the workload. In a real cluster these are left to Kubernetes.

A template targets edge nodes when its ``nodeSelector`` has the key
``node-role.kubernetes.io/edge`` or its required node affinity tests that key
(``In`` or ``Exists``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.model import (
    ANNOTATION_REBALANCE,
    OwnerRef,
    Placement,
    PlacementKey,
    parse_metadata,
    parse_spec,
)

__all__ = [
    "EDGE_ROLE_LABEL",
    "deployment_strategy",
    "placement_from_workload",
    "targets_edge",
    "workload_spec",
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
