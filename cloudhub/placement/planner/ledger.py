"""Which pod is where and whose, and what must be looked at again.

The ledger binds pods to their nodes and owners (charging their requests), keeps the
placements by key and uid, the orphans (pods placement owned whose owner is gone), the
placements to evaluate at the next plan (``dirty``) and those short of capacity
(``wanting``), and the heap of offline-tolerance deadlines.

Only what changed is re-evaluated: a placement is dirty when its spec changes, when a
node it selects (or runs on) changes, when one of its pods changes, when an offline
tolerance of one of its nodes expires or, for placements short of capacity, when
capacity is freed where they could use it (:meth:`Ledger.capacity_freed`). Inside a
placement only the affected groups, and where possible only the affected nodes of a
group, are marked.
"""

from __future__ import annotations

import heapq

from cloudhub.placement.model import Mode, PlacementKey
from cloudhub.placement.planner.capacity import charge, discharge
from cloudhub.placement.planner.index import FleetIndex
from cloudhub.placement.planner.state import PlacementState, PodRecord, mark

__all__ = ["Ledger"]


class Ledger:
    """Pods by key, node and owner; placements by key and uid; what is dirty.

    Args:
        index: the fleet's nodes (charges go to them).

    Attributes:
        pods: every pod bound to a node, by ``(namespace, name)``.
        by_node: pod keys per node name (nodes not known yet included).
        by_owner_uid: pod keys per controller ownerReference uid.
        states: placements by key.
        by_uid: placement keys by uid.
        dirty: placements to evaluate at the next plan.
        wanting: placements short of capacity or with unassigned replicas.
        deadlines: heap of ``(epoch seconds, placement, node)``: offline tolerances.
        orphans: pods placement owned whose placement is gone.
    """

    __slots__ = (
        "by_node",
        "by_owner_uid",
        "by_uid",
        "deadlines",
        "dirty",
        "index",
        "orphans",
        "pods",
        "states",
        "wanting",
    )

    def __init__(self, index: FleetIndex) -> None:
        self.index = index
        self.pods: dict[tuple[str, str], PodRecord] = {}
        self.by_node: dict[str, set[tuple[str, str]]] = {}
        self.by_owner_uid: dict[str, set[tuple[str, str]]] = {}
        self.states: dict[PlacementKey, PlacementState] = {}
        self.by_uid: dict[str, PlacementKey] = {}
        self.dirty: set[PlacementKey] = set()
        self.wanting: set[PlacementKey] = set()
        self.deadlines: list[tuple[float, PlacementKey, str]] = []
        self.orphans: set[tuple[str, str]] = set()

    def bind(self, pod: PodRecord) -> None:
        """Record an observed pod: on its node (charged), with its owner and group."""
        key = pod.key
        self.pods[key] = pod
        self.by_node.setdefault(pod.node, set()).add(key)
        if pod.owner_uid:
            self.by_owner_uid.setdefault(pod.owner_uid, set()).add(key)
            owner = self.by_uid.get(pod.owner_uid)
            if owner is not None:
                state = self.states[owner]
                pod.owner = owner
                pod.priority = state.p.spec.priority
                state.pods[key] = pod
                pod.group = self.index.group_of(state, pod.node)
                group = state.groups.get(pod.group)
                if group is None:
                    state.rebuild = True
                else:
                    group.pods[key] = pod
            elif pod.ours:
                self.orphans.add(key)
        node = self.index.nodes.get(pod.node)
        if node is not None:
            node.pods.add(key)
            charge(pod, self.index.nodes)
        self.touch(pod)
        self.arm(pod)

    def arm(self, pod: PodRecord) -> None:
        """Schedule the failover check of a replica bound to an offline node."""
        node = self.index.nodes.get(pod.node)
        if node is None or node.offline_since is None or pod.owner is None:
            return
        state = self.states.get(pod.owner)
        if state is not None and state.p.spec.mode is Mode.REPLICAS:
            deadline = node.offline_since + state.p.spec.offline_toleration_seconds
            heapq.heappush(self.deadlines, (deadline, pod.owner, node.name))

    def unbind(self, pod: PodRecord) -> None:
        """Forget a pod (its charge goes; its placement is marked)."""
        key = pod.key
        if pod.charged:
            discharge(pod, self.index.nodes)
        self.pods.pop(key, None)
        self.orphans.discard(key)
        self.by_node.get(pod.node, set()).discard(key)
        if pod.owner_uid:
            self.by_owner_uid.get(pod.owner_uid, set()).discard(key)
        node = self.index.nodes.get(pod.node)
        if node is not None:
            node.pods.discard(key)
        if pod.owner is not None:
            state = self.states.get(pod.owner)
            if state is not None:
                state.pods.pop(key, None)
                group = state.groups.get(pod.group)
                if group is not None:
                    group.pods.pop(key, None)
            self.touch(pod)

    def reprioritise(self, state: PlacementState) -> None:
        """Re-charge a placement's pods under its (changed) priority."""
        priority = state.p.spec.priority
        nodes = self.index.nodes
        for pod in state.pods.values():
            if pod.priority != priority:
                charged = pod.charged
                if charged:
                    discharge(pod, nodes)
                pod.priority = priority
                if charged:
                    charge(pod, nodes)

    def touch(self, pod: PodRecord) -> None:
        """A pod changed: mark its group (its node only) and its placement dirty."""
        if pod.owner is None:
            return
        state = self.states.get(pod.owner)
        if state is None:
            return
        group = state.groups.get(pod.group)
        if group is None:
            state.rebuild = True
        else:
            mark(state, group, pod.node)
        self.dirty.add(pod.owner)

    def capacity_freed(self, name: str) -> None:
        """Capacity may have appeared on ``name``: wake placements short of it."""
        index = self.index
        node = index.nodes.get(name)
        if node is None or not self.wanting:
            return
        for key in list(self.wanting):
            state = self.states.get(key)
            # A node that just joined is not in ``sel`` until the next rebuild: its
            # selector match decides (a group capped while it held only offline
            # nodes must take the newcomer).
            if state is None or (name not in state.sel and not index.matches(state, node)):
                continue
            value = index.group_of(state, name)
            group = state.groups.get(value)
            if group is not None:
                group.cap = None
                mark(state, group, name)
                state.targets_stale = True
                self.dirty.add(key)
