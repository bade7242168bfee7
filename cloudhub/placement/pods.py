"""The Pods placement writes, and what it reads back from Pods.

Every pod written is bound (``spec.nodeName``), labelled with its placement,
group and template hash, owned by its placement (``ownerReferences`` with
``controller: true``), and tolerates ``node.kubernetes.io/unreachable`` and
``node.kubernetes.io/not-ready`` with ``NoExecute`` and no
``tolerationSeconds``: Kubernetes' taint manager then never evicts it from a
disconnected node. Failover is the placement's decision
(``offlineTolerationSeconds``), not the eviction timer's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cloudhub.placement.model import (
    LABEL_GROUP,
    LABEL_PLACEMENT,
    LABEL_TEMPLATE_HASH,
    GroupTemplate,
    Placement,
)
from cloudhub.placement.selectors import Taint, TaintEffect, parse_tolerations

__all__ = ["NOT_READY_TAINT", "UNREACHABLE_TAINT", "owner_label_value", "pod_ready", "render_pod"]

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
_NEVER_EVICT = (
    Taint(UNREACHABLE_TAINT, "", TaintEffect.NO_EXECUTE),
    Taint(NOT_READY_TAINT, "", TaintEffect.NO_EXECUTE),
)


def owner_label_value(name: str) -> str:
    """The placement label value for an owner name (label values stop at 63 characters)."""
    if len(name) <= 63:
        return name
    return name[:63].rstrip("-_.")


def render_pod(
    placement: Placement,
    group: str,
    node: str,
    name: str,
    template: GroupTemplate,
) -> dict[str, Any]:
    """Build the Pod JSON for one replica.

    Args:
        placement: the placement the pod belongs to.
        group: its group ("" when the placement has no groups).
        node: the node it is bound to.
        name: the pod name.
        template: the group's effective template.

    Returns:
        A Pod object ready to POST to ``/api/v1/namespaces/{ns}/pods``.
    """
    meta = template.template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels[LABEL_PLACEMENT] = owner_label_value(placement.name)
    labels[LABEL_TEMPLATE_HASH] = template.hash
    if group:
        labels[LABEL_GROUP] = group
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": placement.namespace,
        "labels": labels,
        "ownerReferences": [placement.owner.to_json()],
    }
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    spec = copy.deepcopy(dict(template.template["spec"]))
    spec["nodeName"] = node
    kept = []
    for raw, parsed in zip(
        spec.get("tolerations") or [], parse_tolerations(spec.get("tolerations"), ""), strict=True
    ):
        # A matching toleration with tolerationSeconds would bound the stay
        # (the taint manager takes the smallest), so drop those.
        if parsed.toleration_seconds is not None and any(parsed.tolerates(t) for t in _NEVER_EVICT):
            continue
        kept.append(raw)
    for taint in _NEVER_EVICT:
        kept.append({"key": taint.key, "operator": "Exists", "effect": "NoExecute"})
    spec["tolerations"] = kept
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Whether a Pod's ``Ready`` condition is ``True`` (kubelet's readiness)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False
