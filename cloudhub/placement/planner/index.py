"""The fleet's nodes, indexed by label, and which of them a placement's groups may use.

Rules (each has a test in ``tests/cloudhub/placement``):

- Eligibility: the placement's nodeSelector AND the template's own
  nodeSelector, required node affinity and nodeName pin; untolerated
  NoSchedule/NoExecute taints exclude a node for new pods; an untolerated
  NoExecute taint also removes existing pods (NoSchedule does not, as in
  Kubernetes). Whether a node is online or cordoned is decided where pods are
  placed (:mod:`~cloudhub.placement.planner.replicas`,
  :mod:`~cloudhub.placement.planner.per_node`), not here.
- Groups: a placement with ``groups`` has one group per value of its ``byLabel``
  label among its eligible nodes (only the listed ``members`` when given).

Labels are indexed (key -> value -> node names) so that selectors are evaluated with
set algebra; selector results, partitions by group label and whole-group candidate
lists are cached until a node's labels or taints change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudhub.placement.planner.state import (
    NO_GROUP,
    GroupState,
    NodeRecord,
    PlacementState,
)
from cloudhub.placement.selectors import (
    LabelSelector,
    Operator,
    Requirement,
    TaintEffect,
    tolerates_all,
)

__all__ = ["FleetIndex"]

_NEW_EFFECTS = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})
_KEEP_EFFECTS = frozenset({TaintEffect.NO_EXECUTE})


class FleetIndex:
    """Nodes by name and by label, and the eligibility of nodes for placements.

    Attributes:
        nodes: every node by name.
        all: every node name.
        tainted: the names of nodes with taints.
    """

    __slots__ = (
        "all",
        "group_cache",
        "key_nodes",
        "labels",
        "nodes",
        "partitions",
        "sel_cache",
        "sorted",
        "taint_verdicts",
        "tainted",
    )

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRecord] = {}
        self.labels: dict[str, dict[str, set[str]]] = {}
        self.key_nodes: dict[str, set[str]] = {}
        self.all: set[str] = set()
        self.tainted: set[str] = set()
        self.sorted: dict[tuple[str, str], tuple[str, ...]] = {}
        self.sel_cache: dict[Any, frozenset[str]] = {}
        self.taint_verdicts: dict[tuple, Any] = {}
        self.partitions: dict[tuple[str, int], tuple[frozenset[str], dict]] = {}
        self.group_cache: dict[tuple, tuple[set[str], set[str], tuple[str, ...]]] = {}

    def index_labels(self, name: str, old: Mapping[str, str], new: Mapping[str, str]) -> None:
        """Move node ``name`` in the label index from labels ``old`` to ``new``."""
        if old == new:
            return
        self.sel_cache.clear()
        self.partitions.clear()
        self.group_cache.clear()
        for key, value in old.items():
            if new.get(key) != value:
                values = self.labels.get(key, {})
                values.get(value, set()).discard(name)
                self.sorted.pop((key, value), None)
                if key not in new:
                    self.key_nodes.get(key, set()).discard(name)
        for key, value in new.items():
            if old.get(key) != value:
                self.labels.setdefault(key, {}).setdefault(value, set()).add(name)
                self.key_nodes.setdefault(key, set()).add(name)
                self.sorted.pop((key, value), None)

    def forget_groups(self) -> None:
        """A node appeared, vanished or changed taints: cached groups are stale."""
        self.group_cache.clear()
        self.partitions.clear()

    def req_nodes(self, req: Requirement) -> set[str]:
        """The nodes that satisfy one selector requirement."""
        values = self.labels.get(req.key, {})
        op = req.operator
        if op is Operator.IN:
            out: set[str] = set()
            for value in req.values:
                out |= values.get(value, set())
            return out
        if op is Operator.NOT_IN:
            excluded: set[str] = set()
            for value in req.values:
                excluded |= values.get(value, set())
            return self.all - excluded
        if op is Operator.EXISTS:
            return set(self.key_nodes.get(req.key, set()))
        if op is Operator.DOES_NOT_EXIST:
            return self.all - self.key_nodes.get(req.key, set())
        out = set()
        for value, names in values.items():
            if req.matches({req.key: value}):
                out |= names
        return out

    def select(self, requirements: tuple[Requirement, ...]) -> frozenset[str]:
        """The nodes that satisfy every requirement (cached until labels change)."""
        cached = self.sel_cache.get(requirements)
        if cached is not None:
            return cached
        result: set[str] | None = None
        for req in sorted(requirements, key=lambda r: r.operator is not Operator.IN):
            nodes = self.req_nodes(req)
            result = nodes if result is None else result & nodes
            if not result:
                break
        out = frozenset(self.all if result is None else result)
        self.sel_cache[requirements] = out
        return out

    def eligible(self, state: PlacementState) -> frozenset[str] | set[str]:
        """The nodes a placement selects: its nodeSelector and its template's selector,
        required node affinity and nodeName (taints are judged per group)."""
        spec = state.p.spec
        shape = state.p.group_template("").shape
        reqs = spec.node_selector.requirements() + LabelSelector(shape.node_selector).requirements()
        sel: frozenset[str] | set[str] = self.select(reqs)
        if shape.affinity is not None:
            allowed: set[str] = set()
            for term in shape.affinity:
                names = self.select(term.expressions)
                allowed |= (
                    {n for n in names if term.matches(n, self.nodes[n].labels)}
                    if (term.node_names or term.excluded_names)
                    else names
                )
            sel &= allowed
        if shape.node_name is not None:
            sel &= {shape.node_name}
        return sel

    def matches(self, state: PlacementState, node: NodeRecord) -> bool:
        """Whether one node is eligible for a placement (as :meth:`eligible` would say)."""
        spec = state.p.spec
        shape = state.p.group_template("").shape
        labels = node.labels
        if not spec.node_selector.matches(labels):
            return False
        if any(labels.get(k) != v for k, v in shape.node_selector):
            return False
        if shape.affinity is not None and not any(
            t.matches(node.name, labels) for t in shape.affinity
        ):
            return False
        return shape.node_name is None or shape.node_name == node.name

    def group_of(self, state: PlacementState, node_name: str) -> str:
        """The placement's group node ``node_name`` is in ("" without groups)."""
        groups = state.p.spec.groups
        if groups is None:
            return ""
        node = self.nodes.get(node_name)
        if node is None:
            return NO_GROUP
        return node.labels.get(groups.by_label, NO_GROUP)

    def rebuild(self, state: PlacementState) -> None:
        """Recompute a placement's eligible nodes and groups, and sort its pods into them
        (targets, caps and stats carry over by group)."""
        p = state.p
        spec = p.spec
        sel = self.eligible(state)
        state.sel = sel
        old_groups = state.groups
        groups: dict[str, GroupState] = {}
        if spec.groups is not None:
            by = spec.groups.by_label
            partition = self.partition(sel, by)
            if spec.groups.members is not None:
                values = [m.value for m in spec.groups.members if m.value in partition]
            else:
                values = list(partition)
            for value in values:
                groups[value] = self.make_group(state, value, partition[value], (by, value))
        elif sel:
            groups[""] = self.make_group(state, "", sel, None)
        for pod in state.pods.values():
            pod.group = self.group_of(state, pod.node)
            group = groups.get(pod.group)
            if group is None:
                group = GroupState(
                    pod.group, p.group_template("" if pod.group == NO_GROUP else pod.group)
                )
                groups[pod.group] = group
            group.pods[pod.key] = pod
        for value, group in groups.items():
            old = old_groups.get(value)
            if old is not None:
                group.target = old.target
                group.cap = old.cap
                group.stats = old.stats
        state.groups = groups
        state.dirty = set(groups)
        state.gstat = {}
        state.gtuple = None
        state.totals = [0, 0, 0, 0]
        state.unavailable = set()
        state.short = {v for v, g in groups.items() if g.cap is not None}
        state.order = sorted(v for v in groups if v != NO_GROUP)
        state.rebuild = False
        state.targets_stale = True

    def partition(self, sel: frozenset[str] | set[str], by: str) -> dict[str, frozenset[str]]:
        """Split eligible nodes by the value of label ``by`` (cached per selector result)."""
        cache_key = (by, id(sel))
        cached = self.partitions.get(cache_key)
        if cached is not None and cached[0] is sel:
            return cached[1]
        index = self.labels.get(by, {})
        whole_fleet = len(sel) == len(self.all)
        out: dict[str, frozenset[str]] = {}
        if whole_fleet or len(sel) * 4 >= len(self.key_nodes.get(by, ())):
            for value, members in index.items():
                nodes = members if whole_fleet else members & sel
                if nodes:
                    out[value] = frozenset(nodes)
        else:
            buckets: dict[str, set[str]] = {}
            for name in sel:
                value = self.nodes[name].labels.get(by)
                if value is not None:
                    buckets.setdefault(value, set()).add(name)
            out = {v: frozenset(n) for v, n in buckets.items()}
        if isinstance(sel, frozenset):
            self.partitions[cache_key] = (sel, out)
        return out

    def make_group(
        self,
        state: PlacementState,
        value: str,
        nodes: set[str],
        index_key: tuple[str, str] | None,
    ) -> GroupState:
        """A group of ``nodes`` with its taint verdicts applied: ``new`` (may take new
        pods), ``keep`` (may keep pods) and the sorted candidates."""
        tmpl = state.p.group_template(value)
        group = GroupState(value, tmpl)
        tolerations = tmpl.shape.tolerations
        whole = index_key is not None and len(nodes) == len(self.labels[index_key[0]][index_key[1]])
        cache_key = (index_key, tolerations) if whole else None
        if cache_key is not None:
            cached = self.group_cache.get(cache_key)
            if cached is not None:
                group.new, group.keep, group.cands = cached
                return group
        new = keep = nodes
        tainted = nodes & self.tainted if self.tainted else ()
        if tainted:
            bad_new = set()
            bad_keep = set()
            for name in tainted:
                verdict = self.taint_verdict(tolerations, self.nodes[name].taints)
                if verdict:
                    bad_new.add(name)
                    if verdict == 2:
                        bad_keep.add(name)
            new = nodes - bad_new if bad_new else nodes
            keep = nodes - bad_keep if bad_keep else nodes
        group.new, group.keep = new, keep
        if new is nodes and whole:
            cands = self.sorted.get(index_key)
            if cands is None:
                cands = tuple(sorted(new))
                self.sorted[index_key] = cands
        else:
            cands = tuple(sorted(new))
        group.cands = cands
        if cache_key is not None:
            self.group_cache[cache_key] = (new, keep, cands)
        return group

    def taint_verdict(self, tolerations: tuple, taints: tuple) -> int:
        """0: tolerated; 1: repels new pods (NoSchedule); 2: also evicts (NoExecute)."""
        key = (tolerations, taints)
        verdict = self.taint_verdicts.get(key)
        if verdict is None:
            if tolerates_all(tolerations, taints, _KEEP_EFFECTS) is not None:
                verdict = 2
            elif tolerates_all(tolerations, taints, _NEW_EFFECTS) is not None:
                verdict = 1
            else:
                verdict = 0
            self.taint_verdicts[key] = verdict
        return verdict
