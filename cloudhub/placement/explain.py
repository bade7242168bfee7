"""Why each node was chosen or rejected for a placement (``cloudhub placement explain``)."""

from __future__ import annotations

from collections import Counter

from cloudhub.placement.model import Mode, PlacementKey
from cloudhub.placement.plan import NodeExplanation
from cloudhub.placement.planner import NodeView, Planner
from cloudhub.placement.selectors import TaintEffect

__all__ = ["explain", "format_explanations"]

_REPELS = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


def explain(planner: Planner, key: PlacementKey, now: float) -> list[NodeExplanation]:
    """Explain, node by node, the current placement of ``key``.

    Args:
        planner: the planner holding the fleet (after a :meth:`Planner.plan`).
        key: the placement.
        now: the current time, epoch seconds (for offline durations).

    Returns:
        One explanation per node, chosen nodes first, then by name. Empty when
        the placement is unknown.
    """
    placement = planner.placement(key)
    if placement is None:
        return []
    spec = placement.spec
    pods = [p for p in planner.pods_of(key) if not p["deleting"]]
    on_node = Counter(p["node"] for p in pods)
    ready_on = Counter(p["node"] for p in pods if p["ready"])
    groups = planner.group_views(key)
    out = []
    for node in planner.node_views():
        group = _group(spec.groups.by_label, node) if spec.groups is not None else ""
        template = placement.group_template(group or "")
        reasons = _rejections(placement, node, group, template.shape, groups)
        count = on_node.get(node.name, 0)
        if reasons and not count:
            out.append(NodeExplanation(node.name, False, 0, group, tuple(reasons)))
            continue
        if count:
            why = [
                f"runs {count} replica{'s' if count > 1 else ''}"
                + (f" of group {group}" if group else "")
            ]
            if node.offline_since is not None:
                away = now - node.offline_since
                if spec.mode is Mode.REPLICAS and away >= spec.offline_toleration_seconds:
                    why.append(
                        f"offline for {away:.0f} s, past the "
                        f"{spec.offline_toleration_seconds} s tolerance: its replicas "
                        "are replaced elsewhere and this one goes once they are Ready"
                    )
                else:
                    why.append(f"offline for {away:.0f} s (within the tolerance: kept)")
            else:
                why.append(f"{ready_on.get(node.name, 0)} of {count} Ready")
            why.extend(reasons)
            out.append(NodeExplanation(node.name, True, count, group, tuple(why)))
            continue
        why = []
        if node.offline_since is not None and spec.mode is Mode.REPLICAS:
            why.append(f"offline for {now - node.offline_since:.0f} s: no new replicas")
        elif node.unschedulable and spec.mode is Mode.REPLICAS:
            why.append("cordoned (unschedulable): no new replicas")
        else:
            shortage = _shortage(node, template.shape.requests)
            if shortage:
                why.append(f"insufficient {shortage}")
            else:
                desired = groups.get(group or "", (0, ""))[0]
                scope = f"group {group}" if group else "the placement"
                why.append(
                    f"eligible, not needed: {scope} wants {desired}, placed on other "
                    "nodes with fewer of its replicas"
                )
        out.append(NodeExplanation(node.name, False, 0, group, tuple(why)))
    out.sort(key=lambda e: (not e.chosen, e.node))
    return out


def _group(by_label: str, node: NodeView) -> str | None:
    return node.labels.get(by_label)


def _rejections(placement, node: NodeView, group, shape, groups) -> list[str]:
    spec = placement.spec
    reasons = []
    labels = node.labels
    for req in spec.node_selector.requirements():
        if not req.matches(labels):
            have = f"{req.key}={labels[req.key]}" if req.key in labels else f"no {req.key}"
            reasons.append(f"nodeSelector {req.describe()} not met (node has {have})")
    for k, v in shape.node_selector:
        if labels.get(k) != v:
            have = f"{k}={labels[k]}" if k in labels else f"no {k}"
            reasons.append(f"template nodeSelector {k}={v} not met (node has {have})")
    if shape.affinity is not None and not any(t.matches(node.name, labels) for t in shape.affinity):
        reasons.append("template node affinity: no nodeSelectorTerm matches")
    if shape.node_name is not None and shape.node_name != node.name:
        reasons.append(f"template is pinned to node {shape.node_name}")
    if spec.groups is not None:
        if group is None:
            reasons.append(f"no label {spec.groups.by_label}: in no group")
        elif spec.groups.members is not None and group not in {
            m.value for m in spec.groups.members
        }:
            reasons.append(f"group {group} is not a member of the placement")
        elif (
            spec.groups.members is not None
            and spec.groups.weight(group) == 0
            and (group not in spec.fixed_replicas())
            and spec.replicas_per_group is None
        ):
            reasons.append(f"group {group} has weight 0")
    for taint in node.taints:
        if taint.effect in _REPELS and not any(t.tolerates(taint) for t in shape.tolerations):
            reasons.append(f"taint {taint.describe()} not tolerated")
    return reasons


def _shortage(node: NodeView, requests) -> str | None:
    if node.free_pods <= 0:
        return "pods: the node takes no more pods"
    if requests.cpu > node.free.cpu:
        return f"cpu: requests {requests.cpu}m, {max(node.free.cpu, 0)}m free"
    if requests.memory > node.free.memory:
        return f"memory: requests {requests.memory} bytes, {max(node.free.memory, 0)} free"
    free = dict(node.free.extended)
    for name, units in requests.extended:
        if units > free.get(name, 0):
            return f"{name}: requests {units}, {max(free.get(name, 0), 0)} free"
    return None


def format_explanations(explanations: list[NodeExplanation]) -> str:
    """One line per node, as ``cloudhub placement explain`` prints them."""
    return "\n".join(str(e) for e in explanations)
