"""What placement reads from a Node: labels, allocatable, taints, cordon, connectivity.

Connectivity comes from the hub in the end (it holds each node's session and
Lease); without it :func:`offline_since` reads the Node's ``Ready`` condition and its
``lastHeartbeatTime``, and :func:`offline_since_with_lease` the node's Lease too, as the
node lifecycle controller does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudhub.placement.errors import InvalidObject, InvalidSpec
from cloudhub.placement.model import parse_timestamp
from cloudhub.placement.quantity import CPU, MEMORY, PODS, to_units
from cloudhub.placement.selectors import Taint, parse_taints

__all__ = [
    "DEFAULT_LEASE_DURATION_S",
    "DEFAULT_MAX_PODS",
    "NodeFacts",
    "offline_since",
    "offline_since_with_lease",
    "parse_node",
    "slim_node",
]

DEFAULT_MAX_PODS = 110
"""Pods a node takes when its allocatable does not say (kubelet's default --max-pods)."""

CONDITION_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
"""Taints the node lifecycle controller (or ``TaintNodesByCondition`` admission) derives
from the Ready condition. Placement does not read them: connectivity is its own input
(:func:`offline_since`, or the hub's word), and the offline policy — not a taint — decides
when replicas fail over. Honouring ``not-ready:NoSchedule`` would also keep a brand-new
edge node empty until some controller removed the taint, which nothing does on the
embedded API."""


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """The parts of a Node that placement uses.

    Attributes:
        name: node name.
        labels: node labels.
        cpu: allocatable CPU in millicores.
        memory: allocatable memory in bytes.
        pods: how many pods the node takes.
        extended: other allocatable resources in their units (``nvidia.com/gpu``).
        taints: the node's taints.
        unschedulable: ``spec.unschedulable`` (cordoned).
    """

    name: str
    labels: Mapping[str, str]
    cpu: int
    memory: int
    pods: int
    extended: Mapping[str, int]
    taints: tuple[Taint, ...]
    unschedulable: bool


def parse_node(obj: Mapping[str, Any]) -> NodeFacts:
    """Read a Node JSON object.

    Allocatable falls back to capacity when absent (a node that has not
    reported yet allocates nothing).

    Raises:
        InvalidObject: no name, labels that are not a map, or a malformed
            quantity in allocatable.
    """
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise InvalidObject("Node", "", "metadata.name is missing")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise InvalidObject("Node", name, "metadata.labels is not a map")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    if not isinstance(alloc, Mapping):
        raise InvalidObject("Node", name, "status.allocatable is not a map")
    units: dict[str, int] = {}
    for resource, quantity in alloc.items():
        try:
            units[resource] = to_units(resource, quantity, f"status.allocatable.{resource}")
        except InvalidSpec as exc:
            raise InvalidObject("Node", name, str(exc)) from None
    pods = units.pop(PODS, DEFAULT_MAX_PODS)
    return NodeFacts(
        name=name,
        labels={str(k): str(v) for k, v in labels.items()},
        cpu=units.pop(CPU, 0),
        memory=units.pop(MEMORY, 0),
        pods=pods,
        extended=units,
        taints=tuple(t for t in parse_taints(spec.get("taints")) if t.key not in CONDITION_TAINTS),
        unschedulable=bool(spec.get("unschedulable")),
    )


def slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    """Informer transform: what placement reads of a Node (:func:`parse_node` and
    :func:`offline_since`), nothing else.

    Kept: ``metadata`` name, uid, resourceVersion, labels, creationTimestamp and
    deletionTimestamp; ``spec`` taints and unschedulable; ``status`` allocatable (or
    capacity when it has none) and the Ready condition's type, status, lastHeartbeatTime
    and lastTransitionTime. A whole Node (five conditions, nodeInfo, images, addresses,
    annotations, managedFields) is several KiB of dicts: for 10,000 edge nodes the
    controller's cache cost more than the hub's sessions (measured 10.8 KiB per node of
    Python heap, all of it decoded JSON). A malformed field is kept as it came, so
    :func:`parse_node` still refuses the Node saying why.

    Args:
        obj: the Node JSON as listed or watched.

    Returns:
        A new dict with the same shape and only those fields.
    """
    meta = obj.get("metadata")
    spec = obj.get("spec")
    status = obj.get("status")
    slim: dict[str, Any] = {"apiVersion": obj.get("apiVersion", "v1"), "kind": "Node"}
    if isinstance(meta, Mapping):
        slim["metadata"] = {k: meta[k] for k in _SLIM_METADATA if k in meta}
    else:
        slim["metadata"] = meta
    if isinstance(spec, Mapping):
        slim["spec"] = {k: spec[k] for k in ("taints", "unschedulable") if k in spec}
    if isinstance(status, Mapping):
        kept: dict[str, Any] = {}
        if status.get("allocatable"):
            kept["allocatable"] = status["allocatable"]
        elif "capacity" in status:
            kept["capacity"] = status["capacity"]
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            kept["conditions"] = [
                {k: c[k] for k in _SLIM_READY if k in c}
                for c in conditions
                if isinstance(c, Mapping) and c.get("type") == "Ready"
            ]
        slim["status"] = kept
    return slim


_SLIM_METADATA = (
    "name",
    "uid",
    "resourceVersion",
    "labels",
    "creationTimestamp",
    "deletionTimestamp",
)
_SLIM_READY = ("type", "status", "lastHeartbeatTime", "lastTransitionTime")


def offline_since(
    obj: Mapping[str, Any], now: float, heartbeat_grace_s: float = 40.0
) -> float | None:
    """When a node went offline, or None if it is online.

    A node is online when its ``Ready`` condition is ``True`` and its last
    heartbeat is at most ``heartbeat_grace_s`` old (the node lifecycle
    controller's 40 s grace period). Otherwise it has been offline since its
    last heartbeat (or, without one, since the condition's last transition,
    or since the node was created when it never reported).

    Args:
        obj: the Node JSON.
        now: the current time in seconds since the epoch.
        heartbeat_grace_s: how stale a heartbeat may be for a Ready node.

    Returns:
        Seconds since the epoch, or None.
    """
    status = obj.get("status") or {}
    ready = None
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            ready = condition
            break
    if ready is None:
        created = (obj.get("metadata") or {}).get("creationTimestamp")
        return _time(created) if created else now
    heartbeat = _time(ready.get("lastHeartbeatTime"))
    if ready.get("status") == "True":
        if heartbeat is None or now - heartbeat <= heartbeat_grace_s:
            return None
        return heartbeat
    if heartbeat is not None:
        return heartbeat
    transition = _time(ready.get("lastTransitionTime"))
    return transition if transition is not None else now


DEFAULT_LEASE_DURATION_S = 40
"""A Lease's duration when it states none (kubelet's, and the hub's ``nodes.lease_duration``)."""


def offline_since_with_lease(
    obj: Mapping[str, Any],
    lease: Mapping[str, Any] | None,
    now: float,
    heartbeat_grace_s: float = 40.0,
) -> float | None:
    """When a node went offline, or None if it is online, from its Node and its Lease.

    The Lease (``coordination.k8s.io/v1`` in ``kube-node-lease``, named after the node) is
    the frequent heartbeat: kubelet renews it every 10 s, the hub every
    ``nodes.lease_interval`` while the node's session is up, whereas both refresh the
    Node's ``Ready`` heartbeat only every ``status_report_interval`` (5 and 10 min). As the node
    lifecycle controller does, whichever of the two is fresh proves the node alive: the
    Lease while ``renewTime`` is at most ``leaseDurationSeconds`` old (what a Lease's
    holder promises), the Node as :func:`offline_since` reads it. A node both call stale
    has been offline since the later of its last renewal and what the Node says.

    Args:
        obj: the Node JSON.
        lease: the node's Lease JSON, or None when it has none (then only the Node).
        now: the current time in seconds since the epoch.
        heartbeat_grace_s: how stale a Ready node's heartbeat may be.

    Returns:
        Seconds since the epoch, or None.
    """
    by_node = offline_since(obj, now, heartbeat_grace_s)
    spec = (lease or {}).get("spec") if isinstance(lease, Mapping) else None
    renewed = _time(spec.get("renewTime")) if isinstance(spec, Mapping) else None
    if renewed is None:
        return by_node
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0:
        duration = DEFAULT_LEASE_DURATION_S
    if now - renewed <= duration or by_node is None:
        return None
    return max(renewed, by_node)


def _time(value: object) -> float | None:
    if not value:
        return None
    try:
        return parse_timestamp(value, "")
    except InvalidSpec:
        return None
