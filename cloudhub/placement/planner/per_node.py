"""PerNode mode: one pod on every eligible node of every group, like a DaemonSet.

Rules (each has a test in ``tests/cloudhub/placement``):

- PerNode pods are created on offline and cordoned nodes too (they run when the
  node reconnects), like DaemonSet pods, and never fail over.
- A node without room for its pod preempts lower priority pods there, or is
  reported (``N node(s) without room``).
- Rolling updates go node by node within ``maxUnavailable`` nodes without a
  Ready pod and ``maxSurge`` nodes running two; a node with no room for the pod
  does not hold the rollout up, and an offline node gets the new pod at once
  (nothing on it can be reached anyway). Duplicates on a node are deleted. With
  ``updateStrategy.prePull`` an online node's pod is replaced only once the node
  pulled the new template's images (``Context.pulled``).
- Only the nodes that changed are looked at, unless an update is rolling or the
  group was rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cloudhub.placement.plan import Plan
from cloudhub.placement.planner.actions import create, delete
from cloudhub.placement.planner.capacity import fits, shortage
from cloudhub.placement.planner.classify import classify, is_ready
from cloudhub.placement.planner.context import Context
from cloudhub.placement.planner.preemption import can_preempt, preempt
from cloudhub.placement.planner.state import GroupState, NodeRecord, PlacementState, PodRecord

__all__ = ["reconcile_per_node"]


def reconcile_per_node(state: PlacementState, group: GroupState, ctx: Context, plan: Plan) -> None:
    """One pod per eligible node of ``group``; then record the group's stats (counted in
    nodes: with a pod, with a Ready pod, with a current-template pod)."""
    nodes = ctx.nodes
    current = group.tmpl.hash
    names: Iterable[str] = group.cands
    pods: list[PodRecord] | None = None
    full = group.dirty_nodes is None or group.rolling
    if not full:
        key, value = state.p.key, group.value
        dirty = group.dirty_nodes or set()
        names = sorted(n for n in dirty if n in group.new)
        by_key = ctx.ledger.pods
        pods = [
            pod
            for n in dirty
            for k in ctx.ledger.by_node.get(n, ())
            if (pod := by_key[k]).owner == key and pod.group == value
        ]
        if any(p.hash != current and not p.deleting for p in pods):
            names, pods, full = group.cands, None, True
    live, _lost, soft, hard, redo = classify(state, group, ctx, pods)
    for pod in redo:
        delete(pod, "the earlier delete was not observed", ctx, plan)
    for pod, reason in hard:
        delete(pod, reason, ctx, plan)
    for pod in soft:
        delete(pod, f"node {pod.node} no longer matches the placement", ctx, plan)
    req = group.tmpl.shape.requests
    by_node: dict[str, list[PodRecord]] = {}
    for pod in live:
        by_node.setdefault(pod.node, []).append(pod)
    desired = len(group.cands)
    unavailable_budget, surge_budget = state.p.spec.update_strategy.budgets(desired)
    pre_pull = state.p.spec.update_strategy.pre_pull
    if full:
        group.rolling = any(p.hash != current for p in live)
    # Only nodes that run a pod can be made unavailable by the update: a node
    # with no room for the pod does not hold the rollout up (DaemonSets do).
    unavailable_budget -= sum(
        1
        for name, pods in by_node.items()
        if nodes[name].offline_since is None and not any(is_ready(p, nodes) for p in pods)
    )
    surge_budget -= sum(1 for pods in by_node.values() if len(pods) > 1)
    short: list[str] = []
    for name in names:
        pods = by_node.get(name, [])
        node = nodes[name]
        if not pods:
            if fits(node, req) or (
                can_preempt(state, ctx) and preempt(state, group, 1, ctx, plan, name)
            ):
                if not (group.created_now and group.created_now[-1].node == name):
                    create(state, group, name, ctx, plan)
            else:
                short.append(name)
            continue
        # Best first: Ready, then the newest template generation, then the oldest pod.
        fresh = sorted(
            (p for p in pods if p.hash == current),
            key=lambda p: (not is_ready(p, nodes), p.created, p.name),
        )
        stale = sorted(
            (p for p in pods if p.hash != current),
            key=lambda p: (not is_ready(p, nodes), -p.created, p.name),
        )
        for extra in fresh[1:]:
            delete(extra, "duplicate replica on the node", ctx, plan)
        if fresh:
            if stale and (is_ready(fresh[0], nodes) or node.offline_since is not None):
                for pod in stale:
                    delete(pod, "rolling update to the current template", ctx, plan)
            continue
        for extra in stale[1:]:
            delete(extra, "duplicate replica on the node", ctx, plan)
        if len(stale) > 1:
            surge_budget += 1
        if node.offline_since is None and ctx.waits_for_pull(state.p.key, pre_pull, name):
            continue  # updateStrategy.prePull: the node has not pulled the new images yet
        if node.offline_since is not None:
            # Nothing runs there that anyone can reach: replace it now; the
            # node gets the new pod when it reconnects.
            delete(stale[0], "rolling update to the current template", ctx, plan)
            create(state, group, name, ctx, plan)
        elif surge_budget > 0 and fits(node, req):
            create(state, group, name, ctx, plan)
            surge_budget -= 1
        elif unavailable_budget > 0:
            delete(stale[0], "rolling update to the current template", ctx, plan)
            if fits(node, req):
                create(state, group, name, ctx, plan)
            unavailable_budget -= 1
    _record_short(group, full, names, short, nodes)
    alive = [p for p in group.pods.values() if p.counts and p.node in group.keep]
    group.stats = (
        desired,
        len({p.node for p in alive}),
        len({p.node for p in alive if is_ready(p, nodes)}),
        len({p.node for p in alive if p.hash == current}),
    )


def _record_short(
    group: GroupState,
    full: bool,
    names: Iterable[str],
    short: list[str],
    nodes: Mapping[str, NodeRecord],
) -> None:
    """Remember the group's nodes without room for its pod, and say why."""
    if full:
        group.short_nodes = set(short)
    else:
        group.short_nodes.difference_update(names)
        group.short_nodes.update(short)
    group.short_nodes &= group.new
    lacking = group.short_nodes
    req = group.tmpl.shape.requests
    group.reason = (
        f"{len(lacking)} node(s) without room: "
        + ", ".join(sorted({shortage(nodes[n], req) or "full" for n in lacking}))
        if lacking
        else ""
    )
    if not lacking:
        group.cap = None
