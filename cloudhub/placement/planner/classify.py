"""Sorting a group's pods: which count, which are lost, which go and why.

Rules (each has a test in ``tests/cloudhub/placement``):

- Stability: a healthy replica is only moved for a reason: its node is lost
  past the tolerance, no longer matches, untolerated NoExecute, a higher
  priority placement preempts it
  (:mod:`~cloudhub.placement.planner.preemption`), capacity returned to a group
  that was short, a template update, or an explicit rebalance (annotation)
  (:mod:`~cloudhub.placement.planner.replicas`).
- Failover: a Replicas-mode pod on a node offline for longer than
  ``offlineTolerationSeconds`` is lost: it no longer counts and a replacement
  is placed, but it is not deleted while the node is away (it would be
  stopped at reconnect, before its replacement is proven). PerNode pods never
  fail over.
- A pod is Ready for placement when its Ready condition is True and its node is
  online: a node that is away proves nothing about its pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cloudhub.placement.model import Mode
from cloudhub.placement.planner.context import Context
from cloudhub.placement.planner.state import (
    NO_GROUP,
    GroupState,
    NodeRecord,
    PlacementState,
    PodRecord,
)

__all__ = ["classify", "count_ready", "is_away", "is_ready"]


def classify(
    state: PlacementState,
    group: GroupState,
    ctx: Context,
    pods: Iterable[PodRecord] | None = None,
) -> tuple:
    """Sort a group's pods (or ``pods`` of it): ``(live, lost, soft, hard, redo)``.

    live: counting replicas; lost: on a node offline past the tolerance;
    soft: on a node that no longer matches (deleted once replaced); hard:
    ``(pod, reason)`` to delete now; redo: deletes to issue again.
    """
    now = ctx.now
    deadline = None
    if state.p.spec.mode is not Mode.PER_NODE:
        deadline = now - state.p.spec.offline_toleration_seconds
    redelete_after_s = ctx.settings.redelete_after_s
    nodes = ctx.nodes
    keep = group.keep
    no_group = group.value == NO_GROUP
    live: list[PodRecord] = []
    lost: list[PodRecord] = []
    soft: list[PodRecord] = []
    hard: list[tuple[PodRecord, str]] = []
    redo: list[PodRecord] = []
    append = live.append
    for pod in group.pods.values() if pods is None else pods:
        if pod.terminating or pod.deleting or pod.finished:
            if pod.terminating:
                continue
            if pod.deleting:
                if not pod.assumed and now - pod.deleting_at > redelete_after_s:
                    redo.append(pod)
                continue
            hard.append((pod, f"pod {pod.phase}"))
            continue
        name = pod.node
        node = nodes.get(name)
        if node is None:
            hard.append((pod, f"node {name} no longer exists"))
        elif no_group:
            soft.append(pod)
        elif name not in keep:
            if name in state.sel:
                hard.append((pod, f"node {name} has a NoExecute taint not tolerated"))
            else:
                soft.append(pod)
        elif (
            deadline is not None
            and node.offline_since is not None
            and node.offline_since <= deadline
        ):
            pod.evict_first = True
            lost.append(pod)
        else:
            append(pod)
    return live, lost, soft, hard, redo


def count_ready(pods: Iterable[PodRecord], nodes: Mapping[str, NodeRecord]) -> int:
    """How many of ``pods`` are Ready on an online node."""
    return sum(
        1
        for p in pods
        if p.ready and (node := nodes.get(p.node)) is not None and node.offline_since is None
    )


def is_away(pod: PodRecord, nodes: Mapping[str, NodeRecord]) -> bool:
    """Whether the pod's node is known and offline."""
    node = nodes.get(pod.node)
    return node is not None and node.offline_since is not None


def is_ready(pod: PodRecord, nodes: Mapping[str, NodeRecord]) -> bool:
    """Whether the pod is Ready on an online node."""
    if not pod.ready:
        return False
    node = nodes.get(pod.node)
    return node is not None and node.offline_since is None
