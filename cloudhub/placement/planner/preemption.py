"""Making room for a placement by deleting pods of lower priority placements.

Rules (each has a test in ``tests/cloudhub/placement``):

- Priority: a placement short of capacity preempts pods of strictly lower priority
  placements (never of equal priority, as the scheduler does), and only on online,
  uncordoned nodes it could use. On each node the victims are the fewest pods of the
  lowest priorities that make room (lowest priority first, then the youngest); the
  node chosen is the one whose victims have the lowest highest priority, then the
  fewest victims. Pods that belong to no placement are never preempted.
- Placements are evaluated highest priority first, then oldest
  (:meth:`cloudhub.placement.model.Placement.rank`), so capacity goes to them first.
"""

from __future__ import annotations

from cloudhub.placement.plan import Plan
from cloudhub.placement.planner.actions import create, delete
from cloudhub.placement.planner.capacity import fits_after
from cloudhub.placement.planner.context import Context
from cloudhub.placement.planner.state import GroupState, PlacementState, PodRecord

__all__ = ["can_preempt", "preempt"]


def can_preempt(state: PlacementState, ctx: Context) -> bool:
    """Whether any placement has a lower priority than this one."""
    return ctx.lowest_priority < state.p.spec.priority


def preempt(
    state: PlacementState,
    group: GroupState,
    need: int,
    ctx: Context,
    plan: Plan,
    only: str | None = None,
) -> int:
    """Delete strictly lower priority pods to make room for up to ``need`` replicas of
    ``group`` (on node ``only`` when given, online or not), and plan the replicas.

    Returns:
        How many replicas were placed.
    """
    priority = state.p.spec.priority
    req = group.tmpl.shape.requests
    nodes = ctx.nodes
    pods_by_key = ctx.ledger.pods
    placed = 0
    for _ in range(need):
        best: tuple[tuple[int, int], str, list[PodRecord]] | None = None
        for name in (only,) if only is not None else group.cands:
            node = nodes[name]
            if only is None and (node.offline_since is not None or node.unschedulable):
                continue
            if not node.prio or min(node.prio) >= priority:
                continue
            victims = sorted(
                (
                    pods_by_key[k]
                    for k in node.pods
                    if pods_by_key[k].owner is not None
                    and pods_by_key[k].charged
                    and pods_by_key[k].priority < priority
                ),
                key=lambda p: (p.priority, -p.created),
            )
            chosen: list[PodRecord] = []
            cpu, mem, pods = node.ucpu, node.umem, node.upods
            ext = dict(node.uext)
            for victim in victims:
                if fits_after(node, cpu, mem, pods, ext, req):
                    break
                chosen.append(victim)
                cpu -= victim.req.cpu
                mem -= victim.req.memory
                pods -= 1
                for res, units in victim.req.extended:
                    ext[res] = ext.get(res, 0) - units
            if not chosen or not fits_after(node, cpu, mem, pods, ext, req):
                continue
            cost = (max(v.priority for v in chosen), len(chosen))
            if best is None or cost < best[0]:
                best = (cost, name, chosen)
        if best is None:
            break
        _, name, chosen = best
        for victim in chosen:
            delete(victim, f"preempted by {state.p.key} (priority {priority})", ctx, plan)
            ctx.ledger.touch(victim)
        create(state, group, name, ctx, plan)
        placed += 1
    return placed
