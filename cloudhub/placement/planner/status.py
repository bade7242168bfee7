"""A placement's status: counts per group and in all, and the three conditions.

Rules (each has a test in ``tests/cloudhub/placement``):

- ``desired`` counts every replica the placement asks for, including those no group
  can take; ``placed``, ``ready`` and ``updated`` count live pods (PerNode: nodes).
- ``Placed`` is True when every replica is placed; otherwise its reason says why:
  ``NoEligibleNodes``, ``SkewLimited`` (``maxSkew`` held replicas back),
  ``NodesOffline`` (short only because nodes are offline) or
  ``InsufficientCapacity``, and its message names each short group's cause.
- ``Available`` is False while a group has fewer Ready pods than
  ``desired - maxUnavailable``, as a Deployment's ``MinimumReplicasAvailable``.
- ``Updated`` is True once every replica is placed and runs the current template.
- A condition's ``lastTransitionTime`` changes only when its status does; a status
  equal to the last one is not written again.
"""

from __future__ import annotations

from cloudhub.placement.plan import Condition, GroupStatus, PlacementStatus, Plan
from cloudhub.placement.planner.state import NO_GROUP, PlacementState

__all__ = ["update_status"]


def update_status(state: PlacementState, plan: Plan, processed: set[str], now: float) -> None:
    """Fold the stats of the ``processed`` groups into the placement's status and put the
    status in ``plan`` when it changed (``now``: epoch seconds, for transitions)."""
    spec = state.p.spec
    totals = state.totals
    changed = state.gtuple is None
    for value in processed:
        if value == NO_GROUP:
            continue
        group = state.groups.get(value)
        stats = group.stats if group is not None else (0, 0, 0, 0)
        old = state.gstat.get(value)
        new = GroupStatus(value, *stats) if stats[0] or stats[1] else None
        if old == new:
            continue
        changed = True
        if old is not None:
            for i, n in enumerate(_stats_of(old)):
                totals[i] -= n
            del state.gstat[value]
        state.unavailable.discard(value)
        if new is not None:
            for i, n in enumerate(stats):
                totals[i] += n
            state.gstat[value] = new
            if new.ready < new.desired - spec.update_strategy.budgets(new.desired)[0]:
                state.unavailable.add(value)
    if changed:
        state.gtuple = tuple(state.gstat[v] for v in state.order if v in state.gstat)
    groups = state.gtuple or ()
    desired = totals[0] + state.unassigned
    placed, ready, updated = totals[1], totals[2], totals[3]
    conditions = []
    for type_, (status, reason, message) in (
        ("Placed", _placed(state, desired, placed)),
        ("Available", _available(state, desired, ready)),
        ("Updated", _updated(desired, placed, updated)),
    ):
        old = state.conds.get(type_)
        since = old.last_transition if old is not None and old.status == status else now
        cond = Condition(type_, status, reason, message, since)
        state.conds[type_] = cond
        conditions.append(cond)
    status = PlacementStatus(
        observed_generation=state.p.generation,
        desired=desired,
        placed=placed,
        ready=ready,
        updated=updated,
        groups=groups,
        conditions=tuple(conditions),
    )
    if status != state.status:
        state.status = status
        plan.statuses[state.p.key] = status


def _placed(state: PlacementState, desired: int, placed: int) -> tuple[str, str, str]:
    if placed >= desired and not state.unassigned:
        return ("True", "AllPlaced", f"{placed} of {desired} replicas placed")
    spec = state.p.spec
    reasons = [
        f"group {v}: {state.groups[v].reason}" if v else state.groups[v].reason
        for v in state.short
        if v in state.groups and state.groups[v].reason and v != NO_GROUP
    ]
    missing = desired - placed
    if not state.groups or not any(g.cands for g in state.groups.values()):
        reason = "NoEligibleNodes"
    elif spec.groups is not None and spec.groups.max_skew is not None and (state.unassigned):
        reason = "SkewLimited"
    elif any("offline" in r for r in reasons) and not any("insufficient" in r for r in reasons):
        reason = "NodesOffline"
    else:
        reason = "InsufficientCapacity"
    detail = "; ".join(sorted(reasons)) or "no eligible node"
    return ("False", reason, f"{missing} of {desired} replicas not placed: {detail}")


def _available(state: PlacementState, desired: int, ready: int) -> tuple[str, str, str]:
    if not state.unavailable:
        return ("True", "MinimumReplicasAvailable", f"{ready} of {desired} replicas ready")
    return ("False", "MinimumReplicasUnavailable", f"{ready} of {desired} replicas ready")


def _updated(desired: int, placed: int, updated: int) -> tuple[str, str, str]:
    if updated >= placed and placed >= desired:
        return ("True", "RolloutComplete", f"{updated} replicas run the current template")
    return (
        "False",
        "RollingUpdate" if updated < placed else "Placing",
        f"{updated} of {desired} replicas run the current template",
    )


def _stats_of(status: GroupStatus) -> tuple[int, int, int, int]:
    return (status.desired, status.placed, status.ready, status.updated)
