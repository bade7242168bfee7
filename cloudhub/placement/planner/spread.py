"""How many replicas each group of a Replicas-mode placement should run (its target).

Rules (each has a test in ``tests/cloudhub/placement``):

- Spread: replicas are divided between groups by weight (largest remainder,
  ties to the group that already has more); a group that cannot take its
  share is capped at what it holds and the rest goes to the others, within
  ``maxSkew``. Groups whose replica count an override fixes take exactly that,
  ``replicasPerGroup`` gives every group the same count, and replicas no group
  can take stay unassigned (the placement reports them).
- A group whose nodes are all NoExecute-tainted against the template takes no
  replicas; a group with no online node does not hold the others back under
  ``maxSkew`` (it cannot take its share anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from cloudhub.placement.planner.context import Context
from cloudhub.placement.planner.state import NO_GROUP, PlacementState, mark

__all__ = ["apply_skew", "compute_targets", "water_fill"]


def compute_targets(state: PlacementState, ctx: Context) -> None:
    """Set every group's target (marking those that changed) and the unassigned rest."""
    spec = state.p.spec
    groups = {v: g for v, g in state.groups.items() if v != NO_GROUP and g.keep}
    targets: dict[str, int] = {}
    unassigned = 0
    if spec.groups is None:
        total = spec.total_replicas()
        if "" in groups:
            targets[""] = total
        else:
            unassigned = total
    elif spec.replicas_per_group is not None:
        fixed = spec.fixed_replicas()
        for value in groups:
            targets[value] = fixed.get(value, spec.replicas_per_group)
    else:
        fixed = spec.fixed_replicas()
        for value in groups:
            if value in fixed:
                targets[value] = fixed[value]
        remaining = max(0, spec.total_replicas() - sum(fixed.values()))
        weights = {
            v: spec.groups.weight(v) for v in groups if v not in fixed and spec.groups.weight(v)
        }
        if weights:
            share, left = water_fill(
                remaining,
                weights,
                {v: groups[v].cap for v in weights},
                {v: len(groups[v].pods) for v in weights},
            )
            if spec.groups.max_skew is not None:
                share, clipped = apply_skew(state, share, weights, spec.groups.max_skew, ctx)
                left += clipped
            targets.update(share)
            unassigned = left
        else:
            unassigned = remaining
        unassigned += sum(n for v, n in fixed.items() if v not in groups)
    for value, group in state.groups.items():
        target = targets.get(value, 0)
        if group.target != target:
            group.target = target
            mark(state, group)
    state.unassigned = unassigned
    state.targets_stale = False


def apply_skew(
    state: PlacementState,
    share: dict[str, int],
    weights: dict[str, int],
    max_skew: int,
    ctx: Context,
) -> tuple[dict[str, int], int]:
    """Clip shares so that no group with an online node is more than ``max_skew``
    replicas (weight-adjusted) above the least filled one.

    Returns:
        ``(clipped shares, replicas clipped)``.
    """
    nodes = ctx.nodes
    active = [
        v for v in share if any(nodes[n].offline_since is None for n in state.groups[v].cands)
    ]
    if not active:
        return share, 0
    mean = sum(weights[v] for v in active) / len(active)
    level = min(share[v] * mean / weights[v] for v in active)
    clipped = 0
    out = dict(share)
    for value in active:
        limit = math.floor(level * weights[value] / mean + 1e-9) + max_skew
        if out[value] > limit:
            clipped += out[value] - limit
            out[value] = limit
    return out, clipped


def water_fill(
    total: int,
    weights: Mapping[str, int],
    caps: Mapping[str, int | None],
    prefer: Mapping[str, int],
) -> tuple[dict[str, int], int]:
    """Divide ``total`` by weight (largest remainder), never above a group's cap.

    Returns:
        ``(share per group, replicas no group could take)``.
    """
    share = dict.fromkeys(weights, 0)
    active = [v for v in weights if caps.get(v) is None or caps[v] > 0]
    left = total
    while left > 0 and active:
        weight_sum = sum(weights[v] for v in active)
        quotas = {v: left * weights[v] / weight_sum for v in active}
        floors = {v: int(q) for v, q in quotas.items()}
        rest = left - sum(floors.values())
        order = sorted(active, key=lambda v: (-(quotas[v] - floors[v]), -prefer.get(v, 0), v))
        for v in order[:rest]:
            floors[v] += 1
        overflow = False
        for v in list(active):
            cap = caps.get(v)
            if cap is not None and share[v] + floors[v] > cap:
                taken = cap - share[v]
                share[v] = cap
                left -= taken
                active.remove(v)
                overflow = True
        if not overflow:
            for v in active:
                share[v] += floors[v]
            left = 0
    return share, left
