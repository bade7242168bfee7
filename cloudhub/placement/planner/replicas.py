"""Replicas mode, group by group: place what is missing, then delete what is surplus.

Rules (each has a test in ``tests/cloudhub/placement``):

- New Replicas-mode pods go only to online, uncordoned nodes with room.
- Spread inside a group: a new replica goes to the eligible node running the
  fewest of the placement's replicas, so nodes differ by at most one
  (round-robin among equals spreads placements over the fleet). An explicit
  rebalance (annotation) moves replicas from the fullest to the emptiest nodes.
- A group short of room preempts lower priority pods
  (:mod:`~cloudhub.placement.planner.preemption`); if still short it is capped at
  what it holds and the targets are recomputed, so the other groups take the rest
  (:mod:`~cloudhub.placement.planner.spread`).
- Failover: the replacement of a lost pod is placed like any missing replica.
  When the node returns, the returned pod is the surplus and is deleted only
  once the group's remaining pods are Ready.
- Surplus and rolling updates never take a group's Ready count below its
  desired count (surplus) or below ``desired - maxUnavailable`` (updates),
  and an update never runs more than ``desired + maxSurge`` pods per group.
  Surplus also never takes the placement's Ready count below the sum of its
  targets (targets move between groups when a group comes back from an
  outage), and a pod last seen Ready on a node that is away again counts as
  possibly running: it goes once the pods replacing it are Ready.
"""

from __future__ import annotations

from collections import Counter

from cloudhub.placement.plan import Plan
from cloudhub.placement.planner.actions import create, delete
from cloudhub.placement.planner.capacity import fits, why_short
from cloudhub.placement.planner.classify import classify, count_ready, is_away, is_ready
from cloudhub.placement.planner.context import Context
from cloudhub.placement.planner.preemption import can_preempt, preempt
from cloudhub.placement.planner.spread import compute_targets
from cloudhub.placement.planner.state import (
    NO_GROUP,
    GroupState,
    PlacementState,
    PodRecord,
    mark,
)

__all__ = ["evaluate_replicas"]


def evaluate_replicas(state: PlacementState, ctx: Context, plan: Plan) -> set[str]:
    """Reconcile the dirty groups of a Replicas-mode placement.

    Returns:
        The groups looked at (their status is to be recomputed).
    """
    if state.rebalance:
        for group in state.groups.values():
            group.cap = None
            mark(state, group)
        state.targets_stale = True
    if state.targets_stale:
        compute_targets(state, ctx)
    touched: dict[str, GroupState] = {}
    for _ in range(len(state.groups) + 1):
        batch = sorted(v for v in state.dirty if v in state.groups and state.groups[v].dirty)
        if not batch:
            break
        capped = False
        for value in batch:
            group = state.groups[value]
            group.dirty = False
            touched[value] = group
            if _create_phase(state, group, ctx, plan):
                capped = True
        if not capped:
            break
        compute_targets(state, ctx)
    for value in state.blocked:
        if value in state.groups and value not in touched:
            touched[value] = state.groups[value]
    state.blocked = set()
    state.spare = None
    state.round = touched
    for value in sorted(touched):
        _delete_phase(state, touched[value], ctx, plan)
    return set(touched)


def _spare_ready(state: PlacementState, ctx: Context) -> int:
    """Ready pods (on online nodes) the placement has beyond the sum of its group
    targets: what surplus deletions may take, whichever group holds the surplus.
    A group's own check is not enough when targets move between groups (a group
    back from an outage takes its share again while its pods are not Ready).
    Counted once per round, when a surplus deletion first needs it."""
    if state.spare is not None:
        return state.spare
    touched = state.round
    target = ready = 0
    for value, group in state.groups.items():
        target += group.target
        if value in touched:
            if group.cls is None:
                group.cls = classify(state, group, ctx)
            ready += count_ready(group.cls[0], ctx.nodes)
        else:
            ready += group.stats[2]
    state.spare = ready - target
    return state.spare


def _create_phase(state: PlacementState, group: GroupState, ctx: Context, plan: Plan) -> bool:
    """Place the group's missing replicas. Returns True when the group got capped."""
    if group.cls is None:
        group.cls = classify(state, group, ctx)
    live = group.cls[0]
    target = group.target
    if group.value == NO_GROUP:
        return False
    current = group.tmpl.hash
    have = len(live) + len(group.created_now)
    fresh = sum(1 for p in live if p.hash == current) + len(group.created_now)
    _, surge = state.p.spec.update_strategy.budgets(target)
    want = max(0, min(target - fresh, target + surge - have))
    if fresh < have and _waits_for_pull(state, group, ctx):
        want = max(0, target - have)  # only missing replicas until the images are pulled
    if state.rebalance:
        _rebalance(state, group, live, ctx, plan)
    group.reason = ""
    placed = _place(state, group, want, live, ctx, plan) if want else 0
    achieved = have + placed
    if achieved < target and (group.cap is None or group.cap > achieved):
        group.cap = achieved
        return (
            state.p.spec.groups is not None
            and state.p.spec.replicas_per_group is None
            and (group.value not in state.p.spec.fixed_replicas())
        )
    return False


def _rebalance(
    state: PlacementState, group: GroupState, live: list[PodRecord], ctx: Context, plan: Plan
) -> None:
    """Even out the group's nodes (explicit rebalance): move from fullest to emptiest."""
    nodes = ctx.nodes
    counts: Counter[str] = Counter(p.node for p in live)
    online = [
        n for n in group.cands if nodes[n].offline_since is None and not nodes[n].unschedulable
    ]
    if not online:
        return
    for _ in range(len(live)):
        low = min(online, key=lambda n: (counts[n], n))
        high = max(counts, key=lambda n: (counts[n], n), default=None)
        if high is None or counts[high] - counts[low] <= 1:
            return
        if not fits(nodes[low], group.tmpl.shape.requests):
            online.remove(low)
            if not online:
                return
            continue
        victim = next(p for p in live if p.node == high and not p.evict_first)
        victim.evict_first = True
        create(state, group, low, ctx, plan)
        counts[low] += 1
        counts[high] -= 1


def _place(
    state: PlacementState,
    group: GroupState,
    want: int,
    live: list[PodRecord],
    ctx: Context,
    plan: Plan,
) -> int:
    """Plan up to ``want`` new replicas on the group's least filled online nodes with
    room, then by preemption. Returns how many were placed."""
    cands = group.cands
    n = len(cands)
    if not n:
        group.reason = "no eligible node in this group"
        return 0
    req = group.tmpl.shape.requests
    counts: dict[str, int] = {}
    for pod in live:
        counts[pod.node] = counts.get(pod.node, 0) + 1
    for pod in group.created_now:
        counts[pod.node] = counts.get(pod.node, 0) + 1
    level = 0 if len(counts) < n else min(counts.get(c, 0) for c in cands)
    top = max(counts.values(), default=0)
    start = ctx.rr % n
    nodes = ctx.nodes
    need = want
    while need:
        progressed = False
        for i in range(n):
            name = cands[(start + i) % n]
            count = counts.get(name, 0)
            if count != level:
                continue
            node = nodes[name]
            if node.offline_since is not None or node.unschedulable or not fits(node, req):
                continue
            create(state, group, name, ctx, plan)
            counts[name] = count + 1
            need -= 1
            progressed = True
            if not need:
                break
        if not need or (not progressed and level >= top):
            break
        level += 1
        top = max(top, level)
    ctx.rr += want - need
    if need and can_preempt(state, ctx):
        need -= preempt(state, group, need, ctx, plan)
    if need:
        group.reason = why_short(group, nodes)
    return want - need


def _waits_for_pull(state: PlacementState, group: GroupState, ctx: Context) -> bool:
    """``updateStrategy.prePull`` holds the group's rolling update: an online candidate
    node has not pulled the current template's images yet."""
    if not state.p.spec.update_strategy.pre_pull:
        return False
    key = state.p.key
    return any(
        ctx.waits_for_pull(key, True, name)
        for name in group.cands
        if name in ctx.nodes and ctx.nodes[name].offline_since is None
    )


def _delete_phase(state: PlacementState, group: GroupState, ctx: Context, plan: Plan) -> None:
    """Delete what must go now, old-template pods within the update budget, surplus
    while Ready pods remain for every target, and replaced pods of nodes that no longer
    match; then record the group's stats."""
    if group.cls is None:
        group.cls = classify(state, group, ctx)
    nodes = ctx.nodes
    live, _lost, soft, hard, redo = group.cls
    for pod in redo:
        delete(pod, "the earlier delete was not observed", ctx, plan)
    for pod, reason in hard:
        delete(pod, reason, ctx, plan)
    target = group.target
    current = group.tmpl.hash
    remaining = list(live) + list(group.created_now)
    ready = count_ready(remaining, nodes)
    unavailable, surge = state.p.spec.update_strategy.budgets(target)
    old = [p for p in live if p.hash != current]
    if old and not _waits_for_pull(state, group, ctx):
        fresh_unready = sum(1 for p in remaining if p.hash == current and not is_ready(p, nodes))
        budget = len(remaining) - (target - unavailable) - fresh_unready
        old.sort(key=lambda p: (is_ready(p, nodes), -p.created, p.name))
        for pod in old:
            if budget <= 0:
                break
            delete(pod, "rolling update to the current template", ctx, plan)
            remaining.remove(pod)
            ready -= is_ready(pod, nodes)
            budget -= 1
    allowed = target + surge if any(p.hash != current for p in remaining) else target
    surplus = len(remaining) - allowed
    if surplus > 0:
        counts = Counter(p.node for p in remaining)
        victims = sorted(
            remaining,
            key=lambda p: (
                not p.evict_first,
                p.hash == current,
                is_ready(p, nodes),
                -counts[p.node],
                -p.created,
                p.name,
            ),
        )
        for pod in victims[:surplus]:
            if pod.assumed and pod.created == ctx.now:
                break
            # A Ready pod goes only while Ready ones remain for every target, in its
            # group and across the placement. A pod last seen Ready on a node that
            # is away again (a flapping node) may well be running: it goes once its
            # replacement is proven. A group short of Ready pods is looked at again
            # when one of its pods changes; one waiting for other groups is kept in
            # `blocked` to be looked at with them.
            if is_ready(pod, nodes):
                if ready - 1 < target:
                    break
                if _spare_ready(state, ctx) <= 0:
                    state.blocked.add(group.value)
                    break
            elif pod.ready and is_away(pod, nodes):
                if ready < target:
                    break
                if _spare_ready(state, ctx) < 0:
                    state.blocked.add(group.value)
                    break
            reason = (
                f"surplus: node {pod.node} came back after its replica was replaced"
                if pod.evict_first
                else "surplus replica"
            )
            if is_ready(pod, nodes) and state.spare is not None:
                state.spare -= 1
            delete(pod, reason, ctx, plan)
            remaining.remove(pod)
            ready -= is_ready(pod, nodes)
            counts[pod.node] -= 1
    if len(remaining) <= allowed:
        # No surplus left: a returned pod that is still here has rejoined.
        for pod in remaining:
            pod.evict_first = False
    for pod in soft:
        if not is_ready(pod, nodes) or ready >= target:
            delete(pod, f"node {pod.node} no longer matches the placement", ctx, plan)
    group.rolling = any(p.hash != current for p in remaining)
    group.stats = (
        target,
        len(remaining),
        ready,
        sum(1 for p in remaining if p.hash == current),
    )
