"""The :class:`Planner`: fleet-wide placement as pure, incremental computation.

The planner keeps the fleet's state in memory (nodes with their labels, taints,
allocatable and used capacity; placements; the pods they own) and is told about
changes one object at a time. :meth:`Planner.plan` takes the time as an argument
and returns a :class:`~cloudhub.placement.plan.Plan`: pods to create (bound to
nodes), pods to delete, and the statuses that changed. The caller writes them; the
pods it then observes are fed back with :meth:`Planner.upsert_pod`. Planned creates
and deletes count at once (:mod:`~cloudhub.placement.planner.actions`), so a plan is
never repeated while the API catches up. No I/O, no clock.

Where the rules live (each module states its own, each rule has a test in
``tests/cloudhub/placement``):

- eligibility and groups: :mod:`~cloudhub.placement.planner.index`;
- capacity: :mod:`~cloudhub.placement.planner.capacity`;
- what is re-evaluated when: :mod:`~cloudhub.placement.planner.ledger`;
- spread between groups: :mod:`~cloudhub.placement.planner.spread`;
- stability and failover: :mod:`~cloudhub.placement.planner.classify`;
- Replicas mode (spread inside a group, surplus, rolling updates):
  :mod:`~cloudhub.placement.planner.replicas`;
- PerNode mode: :mod:`~cloudhub.placement.planner.per_node`;
- priority and preemption: :mod:`~cloudhub.placement.planner.preemption`;
- status and conditions: :mod:`~cloudhub.placement.planner.status`.

This module holds the inputs (nodes, placements, pods, connectivity), the plan loop
and the read-only views. Rules that live here:

- A node going offline changes no decision before its offline tolerance expires
  (a deadline is armed, :meth:`Planner.next_deadline`), only readiness; a node
  coming back may have freed capacity.
- After more than ``bulk_node_changes`` node label/taint changes between two plans
  (a relist), every placement is rebuilt at once instead of node by node.
- A plan evaluates the dirty placements highest priority first, then oldest, in up
  to ``max_rounds`` rounds (preemption makes lower priority placements dirty).
- Pods placement labelled and owned whose owner is gone are deleted.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from cloudhub.placement.errors import InvalidObject, InvalidSpec
from cloudhub.placement.model import (
    KIND,
    LABEL_PLACEMENT,
    LABEL_TEMPLATE_HASH,
    Mode,
    Placement,
    PlacementKey,
    parse_timestamp,
)
from cloudhub.placement.nodes import parse_node
from cloudhub.placement.plan import PlacementStatus, Plan
from cloudhub.placement.planner.actions import delete
from cloudhub.placement.planner.capacity import charge, discharge, pod_requests
from cloudhub.placement.planner.context import Context
from cloudhub.placement.planner.per_node import reconcile_per_node
from cloudhub.placement.planner.replicas import evaluate_replicas
from cloudhub.placement.planner.state import (
    NO_GROUP,
    NodeRecord,
    NodeView,
    PlacementState,
    PlannerSettings,
    PodRecord,
    mark,
)
from cloudhub.placement.planner.status import update_status
from cloudhub.placement.pods import pod_ready
from cloudhub.placement.shape import Resources

__all__ = ["MANAGED_KINDS", "Planner", "compute_plan"]

MANAGED_KINDS = frozenset({KIND, "Deployment", "DaemonSet"})
"""Owner kinds whose pods, when labelled by placement, placement garbage-collects."""


class Planner:
    """Incremental fleet placement. See the module docstring for the rules.

    Feed it with ``upsert_*``/``remove_*`` (raw API JSON for nodes and pods,
    parsed :class:`~cloudhub.placement.model.Placement` objects), then call
    :meth:`plan` with the current time; write the plan; feed back what the
    API reports. Call :meth:`plan` again at :meth:`next_deadline` at the latest.
    """

    def __init__(self, settings: PlannerSettings | None = None) -> None:
        self.settings = settings or PlannerSettings()
        self._ctx = Context(self.settings)
        self._index = self._ctx.index
        self._ledger = self._ctx.ledger
        self._shapes: dict[tuple[str, str], Resources] = {}
        self._node_changes = 0
        self._rebuild_all = False

    # --- inputs: nodes -------------------------------------------------------------

    def upsert_node(self, node: Mapping[str, Any], *, offline_since: float | None) -> None:
        """Add or update a node.

        Args:
            node: the Node JSON (labels, allocatable, taints, unschedulable).
            offline_since: when the node lost its connection (epoch seconds),
                or None while it is online (see
                :func:`cloudhub.placement.nodes.offline_since`).

        Raises:
            InvalidObject: the Node has no name or a malformed allocatable.
        """
        facts = parse_node(node)
        name = facts.name
        index, ledger = self._index, self._ledger
        current = index.nodes.get(name)
        if current is None:
            current = NodeRecord(facts)
            index.nodes[name] = current
            index.all.add(name)
            index.index_labels(name, {}, current.labels)
            if current.taints:
                index.tainted.add(name)
            for key in ledger.by_node.get(name, ()):
                pod = ledger.pods[key]
                current.pods.add(key)
                charge(pod, index.nodes)
            current.offline_since = offline_since
            self._structure_changed(name)
            ledger.capacity_freed(name)
            return
        old_labels, old_taints = current.labels, current.taints
        grew = (
            facts.cpu > current.cpu
            or facts.memory > current.mem
            or facts.pods > current.npods
            or any(v > current.ext.get(k, 0) for k, v in facts.extended.items())
            or (current.unschedulable and not facts.unschedulable)
        )
        current.set_facts(facts)
        if old_labels != current.labels:
            index.index_labels(name, old_labels, current.labels)
        if current.taints:
            index.tainted.add(name)
        else:
            index.tainted.discard(name)
        if old_labels != current.labels or old_taints != current.taints:
            self._structure_changed(name)
        self._set_connectivity(current, offline_since)
        if grew:
            ledger.capacity_freed(name)

    def remove_node(self, name: str) -> None:
        """Forget a deleted node; its placement pods are deleted at the next plan."""
        index, ledger = self._index, self._ledger
        node = index.nodes.pop(name, None)
        if node is None:
            return
        index.all.discard(name)
        index.tainted.discard(name)
        index.index_labels(name, node.labels, {})
        for key in list(node.pods):
            pod = ledger.pods[key]
            if pod.charged:
                discharge(pod, index.nodes)  # the node is gone: the pod only stops counting
            ledger.touch(pod)
        self._structure_changed(name)

    def set_connectivity(self, name: str, offline_since: float | None) -> None:
        """Change only a node's connectivity (cheaper than :meth:`upsert_node`)."""
        node = self._index.nodes.get(name)
        if node is not None:
            self._set_connectivity(node, offline_since)

    # --- inputs: placements --------------------------------------------------------

    def upsert_placement(self, placement: Placement) -> None:
        """Add or update a placement (a parsed EdgePlacement or translated workload).

        An update that changes neither spec, generation nor the rebalance
        annotation (e.g. the watch event of a status write) changes nothing.
        """
        ledger = self._ledger
        key = placement.key
        state = ledger.states.get(key)
        if state is not None:
            old = state.p
            if (
                old.spec == placement.spec
                and old.uid == placement.uid
                and old.generation == placement.generation
                and old.rebalance == placement.rebalance
                and old.created == placement.created
            ):
                return
            if old.uid != placement.uid:
                ledger.by_uid.pop(old.uid, None)
                for pod in state.pods.values():
                    pod.owner = None
                    if pod.ours:
                        ledger.orphans.add(pod.key)
                state.pods.clear()
            if old.rebalance != placement.rebalance:
                state.rebalance = True
            state.p = placement
            state.rebuild = True
            for group in state.groups.values():
                group.cap = None
        else:
            state = PlacementState(placement)
            ledger.states[key] = state
        ledger.by_uid[placement.uid] = key
        for pod_key in ledger.by_owner_uid.get(placement.uid, ()):
            pod = ledger.pods[pod_key]
            pod.owner = key
            pod.priority = placement.spec.priority
            state.pods[pod_key] = pod
            ledger.orphans.discard(pod_key)
            ledger.arm(pod)
        ledger.reprioritise(state)
        ledger.dirty.add(key)

    def set_pulled(self, key: PlacementKey, nodes: frozenset[str]) -> None:
        """The nodes that pulled placement ``key``'s current images (its EdgeImagePrePull):
        a rolling update with ``updateStrategy.prePull`` replaces pods only there."""
        if self._ctx.pulled.get(key) == nodes:
            return
        self._ctx.pulled[key] = nodes
        state = self._ledger.states.get(key)
        if state is not None:
            state.rebuild = True
            self._ledger.dirty.add(key)

    def remove_placement(self, key: PlacementKey) -> None:
        """Forget a deleted placement; its pods are deleted at the next plan."""
        self._ctx.pulled.pop(key, None)
        ledger = self._ledger
        state = ledger.states.pop(key, None)
        if state is None:
            return
        ledger.by_uid.pop(state.p.uid, None)
        ledger.dirty.discard(key)
        ledger.wanting.discard(key)
        for pod in state.pods.values():
            pod.owner = None
            if pod.ours:
                ledger.orphans.add(pod.key)

    def placement(self, key: PlacementKey) -> Placement | None:
        """The placement known under ``key``."""
        state = self._ledger.states.get(key)
        return state.p if state else None

    # --- inputs: pods --------------------------------------------------------------

    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        """Add or update a pod as the API reports it.

        Pods owned by a placement (by controller ownerReference uid) are its
        replicas; every other pod bound to a node only uses capacity.

        Raises:
            InvalidObject: the Pod has no name, or a malformed request.
        """
        metadata = pod.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidObject("Pod", "", "metadata.name is missing")
        spec = pod.get("spec") or {}
        node = spec.get("nodeName") or ""
        key = (namespace, name)
        ledger = self._ledger
        old = ledger.pods.get(key)
        if not node:
            if old is not None:
                self.remove_pod(namespace, name)
            return
        rec = PodRecord()
        rec.namespace, rec.name, rec.node = namespace, name, node
        rec.uid = str(metadata.get("uid") or "")
        labels = metadata.get("labels") or {}
        rec.hash = str(labels.get(LABEL_TEMPLATE_HASH, ""))
        rec.owner_uid = ""
        rec.ours = False
        for ref in metadata.get("ownerReferences") or []:
            if isinstance(ref, Mapping) and ref.get("controller"):
                rec.owner_uid = str(ref.get("uid") or "")
                rec.ours = LABEL_PLACEMENT in labels and ref.get("kind") in MANAGED_KINDS
        status = pod.get("status") or {}
        rec.phase = str(status.get("phase") or "Pending")
        rec.finished = rec.phase in ("Succeeded", "Failed")
        rec.ready = pod_ready(pod)
        rec.terminating = bool(metadata.get("deletionTimestamp"))
        created = metadata.get("creationTimestamp")
        now = self._ctx.now
        try:
            rec.created = parse_timestamp(created, "") if created else now
        except InvalidSpec:
            rec.created = now
        rec.req = pod_requests(rec, spec, self._shapes)
        if old is not None:
            rec.deleting, rec.deleting_at = old.deleting, old.deleting_at
            rec.evict_first = old.evict_first
            ledger.unbind(old)
        ledger.bind(rec)
        if old is not None and old.charged and not rec.charged:
            ledger.capacity_freed(node)

    def remove_pod(self, namespace: str, name: str) -> None:
        """Forget a deleted pod (its capacity is freed)."""
        ledger = self._ledger
        pod = ledger.pods.get((namespace, name))
        if pod is None:
            return
        was_charged = pod.charged
        ledger.unbind(pod)
        if was_charged:
            ledger.capacity_freed(pod.node)

    def pod_create_failed(self, namespace: str, name: str) -> None:
        """A planned create was refused: forget it; the next plan retries."""
        pod = self._ledger.pods.get((namespace, name))
        if pod is not None and pod.assumed:
            self.remove_pod(namespace, name)

    def pod_delete_failed(self, namespace: str, name: str) -> None:
        """A planned delete failed (other than NotFound): the next plan reconsiders it."""
        pod = self._ledger.pods.get((namespace, name))
        if pod is not None and pod.deleting:
            pod.deleting = False
            charge(pod, self._index.nodes)
            self._ledger.touch(pod)

    # --- planning ------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When an offline tolerance next expires (epoch seconds), or None."""
        deadlines = self._ledger.deadlines
        return deadlines[0][0] if deadlines else None

    def plan(self, now: float) -> Plan:
        """Re-evaluate what changed and decide the writes.

        Args:
            now: the current time, epoch seconds.

        Returns:
            The plan; its creates and deletes are already assumed done.
        """
        # A fleet-wide plan allocates hundreds of thousands of small acyclic
        # objects; the cyclic collector would rescan the whole fleet many times
        # over (40% of a 100,000-replica plan). Reference counting frees them;
        # the collector is paused for this synchronous call and restored after.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._plan(now)
        finally:
            if enabled:
                gc.enable()

    def _plan(self, now: float) -> Plan:
        ctx, ledger, nodes = self._ctx, self._ledger, self._index.nodes
        ctx.now = now
        plan = Plan()
        states = ledger.states
        if self._rebuild_all:
            for key, state in states.items():
                state.rebuild = True
                ledger.dirty.add(key)
            self._rebuild_all = False
        self._node_changes = 0
        deadlines = ledger.deadlines
        while deadlines and deadlines[0][0] <= now:
            _, key, node = heapq.heappop(deadlines)
            state = states.get(key)
            if state is not None:
                ledger.dirty.add(key)
                for pod_key in nodes[node].pods if node in nodes else ():
                    pod = ledger.pods[pod_key]
                    if pod.owner == key and pod.group in state.groups:
                        mark(state, state.groups[pod.group], pod.node)
        for key in list(ledger.orphans):
            pod = ledger.pods.get(key)
            if pod is None or pod.owner is not None or not pod.ours:
                ledger.orphans.discard(key)
            elif not pod.terminating and not pod.deleting:
                delete(pod, "its owner no longer exists", ctx, plan)
        ctx.lowest_priority = min((s.p.spec.priority for s in states.values()), default=0)
        for _ in range(self.settings.max_rounds):
            if not ledger.dirty:
                break
            order = sorted(ledger.dirty, key=lambda k: states[k].p.rank())
            ledger.dirty = set()
            for key in order:
                state = states.get(key)
                if state is not None:
                    self._evaluate(state, plan)
        return plan

    def _evaluate(self, state: PlacementState, plan: Plan) -> None:
        ctx = self._ctx
        if state.rebuild:
            self._index.rebuild(state)
        if state.p.spec.mode is Mode.PER_NODE:
            processed = set(state.dirty)
            for value in sorted(processed):
                group = state.groups.get(value)
                if group is not None:
                    reconcile_per_node(state, group, ctx, plan)
        else:
            processed = evaluate_replicas(state, ctx, plan)
        processed |= state.dirty
        processed |= state.stale_stats  # stats already adjusted: only the status to redo
        state.stale_stats = set()
        for value in processed:
            group = state.groups.get(value)
            if group is None:
                continue
            group.dirty = False
            group.dirty_nodes = None
            group.cls = None
            group.created_now = []
            if group.cap is not None or group.reason:
                state.short.add(value)
            else:
                state.short.discard(value)
        state.dirty = set()
        state.rebalance = False
        if state.unassigned > 0 or state.short:
            self._ledger.wanting.add(state.p.key)
        else:
            self._ledger.wanting.discard(state.p.key)
        update_status(state, plan, processed, ctx.now)

    # --- node changes --------------------------------------------------------------

    def _structure_changed(self, name: str) -> None:
        """A node appeared, vanished, or changed labels/taints."""
        index, ledger = self._index, self._ledger
        index.forget_groups()
        self._node_changes += 1
        if self._rebuild_all:
            return
        if self._node_changes > self.settings.bulk_node_changes:
            self._rebuild_all = True
            return
        node = index.nodes.get(name)
        on_node = {ledger.pods[k].owner for k in ledger.by_node.get(name, ())}
        for key, state in ledger.states.items():
            if (
                key in on_node
                or name in state.sel
                or (node is not None and index.matches(state, node))
            ):
                state.rebuild = True
                ledger.dirty.add(key)

    def _set_connectivity(self, node: NodeRecord, offline_since: float | None) -> None:
        was = node.offline_since
        if (was is None) == (offline_since is None):
            return
        node.offline_since = offline_since
        ledger = self._ledger
        owners: set[PlacementKey] = set()
        unready: dict[tuple[PlacementKey, str], int] = {}
        for key in node.pods:
            pod = ledger.pods[key]
            if pod.owner is None:
                continue
            owners.add(pod.owner)
            state = ledger.states.get(pod.owner)
            group = state.groups.get(pod.group) if state is not None else None
            if offline_since is not None and group is not None and not group.rolling:
                # Going offline changes no decision before the tolerance expires
                # (a deadline is armed below), only readiness: the group's Ready
                # count drops by the pods that were Ready here.
                slot = (pod.owner, pod.group)
                counted = pod.ready and pod.counts and pod.node in group.keep
                unready[slot] = unready.get(slot, 0) + (1 if counted else 0)
            else:
                ledger.touch(pod)
        for (owner, value), count in unready.items():
            state = ledger.states[owner]
            group = state.groups[value]
            if count and not group.dirty:
                if state.p.spec.mode is Mode.PER_NODE:
                    count = 1  # PerNode counts nodes with a Ready pod
                desired, placed, ready, updated = group.stats
                group.stats = (desired, placed, max(ready - count, 0), updated)
                state.stale_stats.add(value)
                ledger.dirty.add(owner)
        if offline_since is not None:
            for owner in owners:
                state = ledger.states[owner]
                if state.p.spec.mode is Mode.REPLICAS:
                    deadline = offline_since + state.p.spec.offline_toleration_seconds
                    heapq.heappush(ledger.deadlines, (deadline, owner, node.name))
        else:
            ledger.capacity_freed(node.name)

    # --- views ---------------------------------------------------------------------

    def status(self, key: PlacementKey) -> PlacementStatus | None:
        """The last computed status of a placement."""
        state = self._ledger.states.get(key)
        return state.status if state else None

    def placements(self) -> list[Placement]:
        """Every known placement, highest priority first."""
        return sorted((s.p for s in self._ledger.states.values()), key=Placement.rank)

    def pods_of(self, key: PlacementKey) -> list[dict[str, Any]]:
        """The pods of a placement as planner sees them (for explain and tests).

        Returns:
            ``[{"name", "node", "group", "hash", "ready", "phase", "deleting",
            "assumed"}]`` sorted by name.
        """
        state = self._ledger.states.get(key)
        if state is None:
            return []
        return sorted(
            (
                {
                    "name": p.name,
                    "node": p.node,
                    "group": p.group,
                    "hash": p.hash,
                    "ready": p.ready,
                    "phase": p.phase,
                    "deleting": p.deleting or p.terminating,
                    "assumed": p.assumed,
                }
                for p in state.pods.values()
            ),
            key=lambda d: d["name"],
        )

    def node_views(self) -> list[NodeView]:
        """Every node as planner sees it, sorted by name (for explain)."""
        out = []
        nodes = self._index.nodes
        for name in sorted(nodes):
            node = nodes[name]
            out.append(
                NodeView(
                    name=name,
                    labels=dict(node.labels),
                    taints=node.taints,
                    unschedulable=node.unschedulable,
                    offline_since=node.offline_since,
                    free=Resources(
                        node.cpu - node.ucpu,
                        node.mem - node.umem,
                        tuple(sorted((k, v - node.uext.get(k, 0)) for k, v in node.ext.items())),
                    ),
                    free_pods=node.npods - node.upods,
                )
            )
        return out

    def group_views(self, key: PlacementKey) -> dict[str, tuple[int, str]]:
        """``{group: (desired replicas, why short or "")}`` of a placement (for explain)."""
        state = self._ledger.states.get(key)
        if state is None:
            return {}
        return {
            value: (group.stats[0], group.reason)
            for value, group in state.groups.items()
            if value != NO_GROUP
        }

    def node_usage(self, name: str) -> dict[str, int] | None:
        """Used and allocatable capacity of a node (for explain and tests)."""
        node = self._index.nodes.get(name)
        if node is None:
            return None
        return {
            "cpu": node.ucpu,
            "cpu_allocatable": node.cpu,
            "memory": node.umem,
            "memory_allocatable": node.mem,
            "pods": node.upods,
            "pods_allocatable": node.npods,
            **{f"{k}": v for k, v in node.uext.items()},
            **{f"{k}_allocatable": v for k, v in node.ext.items()},
        }


def compute_plan(
    nodes: Iterable[tuple[Mapping[str, Any], float | None]],
    pods: Iterable[Mapping[str, Any]],
    placements: Iterable[Placement],
    now: float,
) -> tuple[Plan, Planner]:
    """Place from scratch: one plan for the given fleet (a convenience over :class:`Planner`).

    Args:
        nodes: ``(Node JSON, offline_since)`` pairs.
        pods: existing pods (owned by placements, or any other pod using capacity).
        placements: the placements.
        now: the current time, epoch seconds.

    Returns:
        The plan and the planner holding the resulting state (for
        :func:`cloudhub.placement.explain.explain` or further rounds).
    """
    planner = Planner()
    for node, offline in nodes:
        planner.upsert_node(node, offline_since=offline)
    for placement in placements:
        planner.upsert_placement(placement)
    for pod in pods:
        planner.upsert_pod(pod)
    return planner.plan(now), planner
