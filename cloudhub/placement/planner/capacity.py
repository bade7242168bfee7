"""What pods ask of nodes, what is charged to each node, and why a group is short.

Rules (each has a test in ``tests/cloudhub/placement``):

- Capacity: requests against allocatable minus what is placed, per resource
  (CPU in millicores, memory in bytes, pod count, extended resources). Every pod
  bound to a node is charged, whoever owns it, until it terminates, finishes, or
  this planner plans its deletion: a pod planned for deletion frees its capacity
  at once (like a scheduler's "assume", the plan counts before the API catches up).
- A pod's requests are the scheduler's: the sum of its containers', or its
  largest init container's when bigger, plus overhead
  (:func:`cloudhub.placement.shape.pod_shape`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from cloudhub.placement.errors import InvalidObject, InvalidSpec
from cloudhub.placement.planner.state import GroupState, NodeRecord, PodRecord
from cloudhub.placement.shape import Resources, pod_shape

__all__ = [
    "charge",
    "discharge",
    "fits",
    "fits_after",
    "pod_requests",
    "shortage",
    "why_short",
]


def pod_requests(
    pod: PodRecord, spec: Mapping[str, Any], cache: dict[tuple[str, str], Resources]
) -> Resources:
    """The requests of an observed pod's spec, cached per owner uid and template hash
    (every replica of one template asks the same).

    Raises:
        InvalidObject: a container's requests are malformed.
    """
    cache_key = (pod.owner_uid, pod.hash) if pod.owner_uid and pod.hash else None
    if cache_key is not None and cache_key in cache:
        return cache[cache_key]
    try:
        req = pod_shape({"spec": spec}, "spec").requests
    except InvalidSpec as exc:
        if not spec.get("containers"):
            req = Resources()
        else:
            raise InvalidObject("Pod", pod.name, str(exc)) from None
    if cache_key is not None:
        cache[cache_key] = req
    return req


def charge(pod: PodRecord, nodes: Mapping[str, NodeRecord]) -> None:
    """Count a pod's requests on its node (once; not for a pod that no longer counts)."""
    if pod.charged or not pod.counts:
        return
    node = nodes.get(pod.node)
    if node is None:
        return
    req = pod.req
    node.ucpu += req.cpu
    node.umem += req.memory
    node.upods += 1
    for name, units in req.extended:
        node.uext[name] = node.uext.get(name, 0) + units
    if pod.owner is not None:
        node.prio[pod.priority] += 1
    pod.charged = True


def discharge(pod: PodRecord, nodes: Mapping[str, NodeRecord]) -> None:
    """Stop counting a pod's requests on its node."""
    if not pod.charged:
        return
    node = nodes.get(pod.node)
    pod.charged = False
    if node is None:
        return
    req = pod.req
    node.ucpu -= req.cpu
    node.umem -= req.memory
    node.upods -= 1
    for name, units in req.extended:
        node.uext[name] = node.uext.get(name, 0) - units
    if pod.owner is not None:
        node.prio[pod.priority] -= 1
        if node.prio[pod.priority] <= 0:
            del node.prio[pod.priority]


def fits(node: NodeRecord, req: Resources) -> bool:
    """Whether a pod asking ``req`` fits on the node as it is charged now."""
    if node.ucpu + req.cpu > node.cpu or node.umem + req.memory > node.mem:
        return False
    if node.upods >= node.npods:
        return False
    for name, units in req.extended:
        if node.uext.get(name, 0) + units > node.ext.get(name, 0):
            return False
    return True


def fits_after(
    node: NodeRecord, cpu: int, mem: int, pods: int, ext: Mapping[str, int], req: Resources
) -> bool:
    """Whether ``req`` fits on the node were it charged ``cpu``/``mem``/``pods``/``ext``
    (what preemption asks after taking victims off)."""
    if cpu + req.cpu > node.cpu or mem + req.memory > node.mem or pods >= node.npods:
        return False
    return all(ext.get(k, 0) + v <= node.ext.get(k, 0) for k, v in req.extended)


def shortage(node: NodeRecord, req: Resources) -> str | None:
    """The first resource the node lacks for ``req``, described; None if it fits."""
    if node.upods >= node.npods:
        return f"pods: {node.upods} of {node.npods} used"
    if node.ucpu + req.cpu > node.cpu:
        return f"cpu: requests {req.cpu}m, free {node.cpu - node.ucpu}m"
    if node.umem + req.memory > node.mem:
        return f"memory: requests {req.memory}, free {node.mem - node.umem} bytes"
    for name, units in req.extended:
        free = node.ext.get(name, 0) - node.uext.get(name, 0)
        if units > free:
            return f"{name}: requests {units}, free {free}"
    return None


def why_short(group: GroupState, nodes: Mapping[str, NodeRecord]) -> str:
    """Why a group's candidates take no more of its replicas, counted by cause."""
    req = group.tmpl.shape.requests
    offline = cordoned = 0
    lacking: Counter[str] = Counter()
    for name in group.cands:
        node = nodes[name]
        if node.offline_since is not None:
            offline += 1
        elif node.unschedulable:
            cordoned += 1
        else:
            lacking[(shortage(node, req) or "full").split(":")[0]] += 1
    parts = []
    if lacking:
        parts.extend(f"insufficient {res} on {k} node(s)" for res, k in lacking.most_common())
    if offline:
        parts.append(f"{offline} node(s) offline")
    if cordoned:
        parts.append(f"{cordoned} node(s) cordoned")
    return ", ".join(parts) or "no eligible node in this group"
