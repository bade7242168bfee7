"""Fleet-wide placement as pure, incremental computation (no I/O, no clock).

The :class:`Planner` keeps the fleet's state in memory (nodes with their
labels, taints, allocatable and used capacity; placements; the pods they own)
and is told about changes one object at a time. :meth:`Planner.plan` takes
the time as an argument and returns a :class:`~cloudhub.placement.plan.Plan`:
pods to create (bound to nodes), pods to delete, and the statuses that
changed. The caller writes them; the pods it then observes are fed back with
:meth:`Planner.upsert_pod`. Like a scheduler's "assume", planned creates and
deletes count at once, so a plan is never repeated while the API catches up.

Only what changed is re-evaluated: a placement is evaluated when its spec
changes, when a node it selects (or runs on) changes, when one of its pods
changes, when an offline tolerance of one of its nodes expires
(:meth:`Planner.next_deadline` says when to call again) or, for placements
short of capacity, when capacity is freed where they could use it. Inside a
placement only the affected groups are reconciled. Labels are indexed
(key -> value -> node names) so that selectors are evaluated with set algebra.

Rules (each has a test in ``tests/cloudhub/placement``):

- Eligibility: the placement's nodeSelector AND the template's own
  nodeSelector, required node affinity and nodeName pin; untolerated
  NoSchedule/NoExecute taints exclude a node for new pods; an untolerated
  NoExecute taint also removes existing pods (NoSchedule does not, as in
  Kubernetes). New Replicas-mode pods go only to online, uncordoned nodes;
  PerNode pods are created on offline nodes too (they run when the node
  reconnects), like DaemonSet pods.
- Capacity: requests against allocatable minus what is placed, per resource
  (CPU in millicores, memory in bytes, pod count, extended resources). A pod
  planned for deletion frees its capacity at once.
- Spread: replicas are divided between groups by weight (largest remainder,
  ties to the group that already has more); a group that cannot take its
  share is capped at what it holds and the rest goes to the others, within
  ``maxSkew``. Inside a group a new replica goes to the eligible node running
  the fewest of the placement's replicas, so nodes differ by at most one
  (round-robin among equals spreads placements over the fleet).
- Stability: a healthy replica is only moved for a reason: its node is lost
  past the tolerance, no longer matches, untolerated NoExecute, a higher
  priority placement preempts it, capacity returned to a group that was
  short, a template update, or an explicit rebalance (annotation).
- Priority: placements are evaluated highest priority first, then oldest.
  A placement short of capacity preempts pods of strictly lower priority
  placements (never of equal priority, as the scheduler does).
- Failover: a Replicas-mode pod on a node offline for longer than
  ``offlineTolerationSeconds`` is lost: it no longer counts and a replacement
  is placed, but it is not deleted while the node is away (it would be
  stopped at reconnect, before its replacement is proven). When the node
  returns, the returned pod is the surplus and is deleted only once the
  group's remaining pods are Ready. PerNode pods never fail over.
- Surplus and rolling updates never take a group's Ready count below its
  desired count (surplus) or below ``desired - maxUnavailable`` (updates),
  and an update never runs more than ``desired + maxSurge`` pods per group.
  Surplus also never takes the placement's Ready count below the sum of its
  targets (targets move between groups when a group comes back from an
  outage), and a pod last seen Ready on a node that is away again counts as
  possibly running: it goes once the pods replacing it are Ready.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cloudhub.placement.errors import InvalidObject, InvalidSpec
from cloudhub.placement.model import (
    KIND,
    LABEL_PLACEMENT,
    LABEL_TEMPLATE_HASH,
    GroupTemplate,
    Mode,
    Placement,
    PlacementKey,
    Resources,
    parse_timestamp,
    pod_shape,
)
from cloudhub.placement.nodes import NodeFacts, parse_node
from cloudhub.placement.plan import (
    Condition,
    GroupStatus,
    PlacementStatus,
    Plan,
    PodCreate,
    PodDelete,
)
from cloudhub.placement.pods import pod_ready
from cloudhub.placement.selectors import (
    LabelSelector,
    Operator,
    Requirement,
    Taint,
    TaintEffect,
    tolerates_all,
)

__all__ = ["MANAGED_KINDS", "NodeView", "Planner", "PlannerSettings", "compute_plan"]

MANAGED_KINDS = frozenset({KIND, "Deployment", "DaemonSet"})
"""Owner kinds whose pods, when labelled by placement, placement garbage-collects."""

_NO_GROUP = "\x00no-group"
_NEW_EFFECTS = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})
_KEEP_EFFECTS = frozenset({TaintEffect.NO_EXECUTE})
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes' generated names
_SUFFIX_SPACE = len(_SUFFIX_ALPHABET) ** 5
_PAIRS = [a + b for b in _SUFFIX_ALPHABET for a in _SUFFIX_ALPHABET]


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the planner sees it: labels, taints, connectivity, free capacity.

    Attributes:
        free: allocatable minus the requests of the pods bound to it
            (millicores, bytes, units).
        free_pods: how many more pods it takes.
    """

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    offline_since: float | None
    free: Resources
    free_pods: int


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """Tunables of the planner.

    Attributes:
        bulk_node_changes: after this many node label/taint changes between
            two plans, placements are re-indexed wholesale instead of node by
            node (a relist touches every node at once).
        redelete_after_s: a pod planned for deletion that is still seen
            without a deletionTimestamp this many seconds later is deleted
            again (the first delete was lost).
        max_rounds: evaluation rounds per plan; preemption makes lower
            priority placements dirty, and they are re-evaluated in the next
            round of the same plan.
    """

    bulk_node_changes: int = 64
    redelete_after_s: float = 30.0
    max_rounds: int = 4


class _Node:
    __slots__ = (
        "cpu",
        "ext",
        "labels",
        "mem",
        "name",
        "npods",
        "offline_since",
        "pods",
        "prio",
        "taints",
        "ucpu",
        "uext",
        "umem",
        "unschedulable",
        "upods",
    )

    def __init__(self, facts: NodeFacts) -> None:
        self.name = facts.name
        self.pods: set[tuple[str, str]] = set()
        self.prio: Counter[int] = Counter()
        self.ucpu = self.umem = self.upods = 0
        self.uext: dict[str, int] = {}
        self.offline_since: float | None = None
        self.set_facts(facts)

    def set_facts(self, facts: NodeFacts) -> None:
        self.labels = dict(facts.labels)
        self.taints = facts.taints
        self.unschedulable = facts.unschedulable
        self.cpu = facts.cpu
        self.mem = facts.memory
        self.npods = facts.pods
        self.ext = dict(facts.extended)

    def fits(self, req: Resources) -> bool:
        if self.ucpu + req.cpu > self.cpu or self.umem + req.memory > self.mem:
            return False
        if self.upods >= self.npods:
            return False
        for name, units in req.extended:
            if self.uext.get(name, 0) + units > self.ext.get(name, 0):
                return False
        return True

    def shortage(self, req: Resources) -> str | None:
        """The first resource the node lacks for ``req``, described; None if it fits."""
        if self.upods >= self.npods:
            return f"pods: {self.upods} of {self.npods} used"
        if self.ucpu + req.cpu > self.cpu:
            return f"cpu: requests {req.cpu}m, free {self.cpu - self.ucpu}m"
        if self.umem + req.memory > self.mem:
            return f"memory: requests {req.memory}, free {self.mem - self.umem} bytes"
        for name, units in req.extended:
            free = self.ext.get(name, 0) - self.uext.get(name, 0)
            if units > free:
                return f"{name}: requests {units}, free {free}"
        return None


class _Pod:
    __slots__ = (
        "assumed",
        "charged",
        "created",
        "deleting",
        "deleting_at",
        "evict_first",
        "finished",
        "group",
        "hash",
        "name",
        "namespace",
        "node",
        "ours",
        "owner",
        "owner_uid",
        "phase",
        "priority",
        "ready",
        "req",
        "terminating",
        "uid",
    )

    def __init__(self) -> None:
        self.assumed = False
        self.charged = False
        self.deleting = False
        self.deleting_at = 0.0
        self.evict_first = False
        self.owner: PlacementKey | None = None
        self.group = ""
        self.priority = 0

    @classmethod
    def planned(
        cls,
        namespace: str,
        name: str,
        node: str,
        p: Placement,
        group: str,
        tmpl: GroupTemplate,
        now: float,
    ) -> _Pod:
        """A pod this planner decided to create (assumed until observed)."""
        pod = cls.__new__(cls)
        pod.namespace = namespace
        pod.name = name
        pod.uid = ""
        pod.node = node
        pod.owner = p.key
        pod.owner_uid = p.uid
        pod.ours = True
        pod.group = group
        pod.hash = tmpl.hash
        pod.ready = False
        pod.phase = "Pending"
        pod.finished = False
        pod.terminating = False
        pod.assumed = True
        pod.charged = False
        pod.deleting = False
        pod.deleting_at = 0.0
        pod.evict_first = False
        pod.created = now
        pod.req = tmpl.shape.requests
        pod.priority = p.spec.priority
        return pod

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def counts(self) -> bool:
        """Whether the pod uses capacity on its node."""
        return not (self.deleting or self.terminating or self.finished)


class _Group:
    __slots__ = (
        "cands",
        "cap",
        "cls",
        "created_now",
        "dirty",
        "dirty_nodes",
        "keep",
        "new",
        "pods",
        "reason",
        "rolling",
        "short_nodes",
        "stats",
        "target",
        "tmpl",
        "value",
    )

    def __init__(self, value: str, tmpl: GroupTemplate) -> None:
        self.value = value
        self.tmpl = tmpl
        self.new: set[str] = set()
        self.keep: set[str] = set()
        self.cands: list[str] | tuple[str, ...] = ()
        self.pods: dict[tuple[str, str], _Pod] = {}
        self.target = 0
        self.cap: int | None = None
        self.dirty = True
        self.dirty_nodes: set[str] | None = None
        self.rolling = True
        self.short_nodes: set[str] = set()
        self.reason = ""
        self.stats = (0, 0, 0, 0)
        self.cls: tuple | None = None
        self.created_now: list[_Pod] = []


class _State:
    __slots__ = (
        "blocked",
        "conds",
        "dirty",
        "groups",
        "gstat",
        "gtuple",
        "order",
        "p",
        "pods",
        "rebalance",
        "rebuild",
        "round",
        "sel",
        "short",
        "spare",
        "stale_stats",
        "status",
        "targets_stale",
        "totals",
        "unassigned",
        "unavailable",
    )

    def __init__(self, placement: Placement) -> None:
        self.p = placement
        self.pods: dict[tuple[str, str], _Pod] = {}
        self.groups: dict[str, _Group] = {}
        self.dirty: set[str] = set()
        self.stale_stats: set[str] = set()
        self.gstat: dict[str, GroupStatus] = {}
        self.gtuple: tuple[GroupStatus, ...] | None = None
        self.totals = [0, 0, 0, 0]
        self.unavailable: set[str] = set()
        self.short: set[str] = set()
        self.order: list[str] = []
        self.sel: frozenset[str] | set[str] = frozenset()
        self.rebuild = True
        self.targets_stale = True
        self.rebalance = False
        self.unassigned = 0
        self.status: PlacementStatus | None = None
        self.conds: dict[str, Condition] = {}
        # Groups whose surplus waits for Ready pods elsewhere in the placement, and
        # how many Ready pods the placement has beyond its targets (this round).
        self.blocked: set[str] = set()
        self.spare: int | None = None  # computed when first needed (see _spare_ready)
        self.round: Mapping[str, _Group] = {}


class Planner:
    """Incremental fleet placement. See the module docstring for the rules.

    Feed it with ``upsert_*``/``remove_*`` (raw API JSON for nodes and pods,
    parsed :class:`~cloudhub.placement.model.Placement` objects), then call
    :meth:`plan` with the current time; write the plan; feed back what the
    API reports. Call :meth:`plan` again at :meth:`next_deadline` at the latest.
    """

    def __init__(self, settings: PlannerSettings | None = None) -> None:
        self.settings = settings or PlannerSettings()
        self._nodes: dict[str, _Node] = {}
        self._index: dict[str, dict[str, set[str]]] = {}
        self._key_nodes: dict[str, set[str]] = {}
        self._all: set[str] = set()
        self._tainted: set[str] = set()
        self._sorted: dict[tuple[str, str], tuple[str, ...]] = {}
        self._sel_cache: dict[Any, frozenset[str]] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._by_node: dict[str, set[tuple[str, str]]] = {}
        self._by_owner_uid: dict[str, set[tuple[str, str]]] = {}
        self._states: dict[PlacementKey, _State] = {}
        self._by_uid: dict[str, PlacementKey] = {}
        self._dirty: set[PlacementKey] = set()
        self._wanting: set[PlacementKey] = set()
        self._deadlines: list[tuple[float, PlacementKey, str]] = []
        self._node_changes = 0
        self._rebuild_all = False
        self._rr = 0
        self._serial: dict[PlacementKey, int] = {}
        self._shapes: dict[tuple[str, str], Resources] = {}
        self._orphans: set[tuple[str, str]] = set()
        self._taint_verdicts: dict[tuple, Any] = {}
        self._partitions: dict[tuple[str, int], tuple[frozenset[str], dict]] = {}
        self._group_cache: dict[tuple, tuple[set[str], set[str], tuple[str, ...]]] = {}
        self._lowest_priority = 0
        self._now = 0.0

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
        current = self._nodes.get(name)
        if current is None:
            current = _Node(facts)
            self._nodes[name] = current
            self._all.add(name)
            self._index_labels(name, {}, current.labels)
            if current.taints:
                self._tainted.add(name)
            for key in self._by_node.get(name, ()):
                pod = self._pods[key]
                current.pods.add(key)
                self._charge(pod)
            current.offline_since = offline_since
            self._structure_changed(name)
            self._capacity_freed(name)
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
            self._index_labels(name, old_labels, current.labels)
        if current.taints:
            self._tainted.add(name)
        else:
            self._tainted.discard(name)
        if old_labels != current.labels or old_taints != current.taints:
            self._structure_changed(name)
        self._set_connectivity(current, offline_since)
        if grew:
            self._capacity_freed(name)

    def remove_node(self, name: str) -> None:
        """Forget a deleted node; its placement pods are deleted at the next plan."""
        node = self._nodes.pop(name, None)
        if node is None:
            return
        self._all.discard(name)
        self._tainted.discard(name)
        self._index_labels(name, node.labels, {})
        for key in list(node.pods):
            pod = self._pods[key]
            if pod.charged:
                self._discharge(pod)
            self._touch(pod)
        self._structure_changed(name)

    def set_connectivity(self, name: str, offline_since: float | None) -> None:
        """Change only a node's connectivity (cheaper than :meth:`upsert_node`)."""
        node = self._nodes.get(name)
        if node is not None:
            self._set_connectivity(node, offline_since)

    # --- inputs: placements --------------------------------------------------------

    def upsert_placement(self, placement: Placement) -> None:
        """Add or update a placement (a parsed EdgePlacement or translated workload).

        An update that changes neither spec, generation nor the rebalance
        annotation (e.g. the watch event of a status write) changes nothing.
        """
        key = placement.key
        state = self._states.get(key)
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
                self._by_uid.pop(old.uid, None)
                for pod in state.pods.values():
                    pod.owner = None
                    if pod.ours:
                        self._orphans.add(pod.key)
                state.pods.clear()
            if old.rebalance != placement.rebalance:
                state.rebalance = True
            state.p = placement
            state.rebuild = True
            for group in state.groups.values():
                group.cap = None
        else:
            state = _State(placement)
            self._states[key] = state
        self._by_uid[placement.uid] = key
        for pod_key in self._by_owner_uid.get(placement.uid, ()):
            pod = self._pods[pod_key]
            pod.owner = key
            pod.priority = placement.spec.priority
            state.pods[pod_key] = pod
            self._orphans.discard(pod_key)
            self._arm(pod)
        self._reprioritise(state)
        self._dirty.add(key)

    def remove_placement(self, key: PlacementKey) -> None:
        """Forget a deleted placement; its pods are deleted at the next plan."""
        state = self._states.pop(key, None)
        if state is None:
            return
        self._by_uid.pop(state.p.uid, None)
        self._dirty.discard(key)
        self._wanting.discard(key)
        for pod in state.pods.values():
            pod.owner = None
            if pod.ours:
                self._orphans.add(pod.key)

    def placement(self, key: PlacementKey) -> Placement | None:
        """The placement known under ``key``."""
        state = self._states.get(key)
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
        old = self._pods.get(key)
        if not node:
            if old is not None:
                self.remove_pod(namespace, name)
            return
        rec = _Pod()
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
        try:
            rec.created = parse_timestamp(created, "") if created else self._now
        except InvalidSpec:
            rec.created = self._now
        rec.req = self._requests(rec, spec)
        if old is not None:
            rec.deleting, rec.deleting_at = old.deleting, old.deleting_at
            rec.evict_first = old.evict_first
            self._unbind(old)
        self._bind(rec)
        if old is not None and old.charged and not rec.charged:
            self._capacity_freed(node)

    def remove_pod(self, namespace: str, name: str) -> None:
        """Forget a deleted pod (its capacity is freed)."""
        pod = self._pods.get((namespace, name))
        if pod is None:
            return
        was_charged = pod.charged
        self._unbind(pod)
        if was_charged:
            self._capacity_freed(pod.node)

    def pod_create_failed(self, namespace: str, name: str) -> None:
        """A planned create was refused: forget it; the next plan retries."""
        pod = self._pods.get((namespace, name))
        if pod is not None and pod.assumed:
            self.remove_pod(namespace, name)

    def pod_delete_failed(self, namespace: str, name: str) -> None:
        """A planned delete failed (other than NotFound): the next plan reconsiders it."""
        pod = self._pods.get((namespace, name))
        if pod is not None and pod.deleting:
            pod.deleting = False
            self._charge(pod)
            self._touch(pod)

    # --- planning ------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When an offline tolerance next expires (epoch seconds), or None."""
        return self._deadlines[0][0] if self._deadlines else None

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
        self._now = now
        plan = Plan()
        if self._rebuild_all:
            for key, state in self._states.items():
                state.rebuild = True
                self._dirty.add(key)
            self._rebuild_all = False
        self._node_changes = 0
        while self._deadlines and self._deadlines[0][0] <= now:
            _, key, node = heapq.heappop(self._deadlines)
            state = self._states.get(key)
            if state is not None:
                self._dirty.add(key)
                for pod_key in self._nodes[node].pods if node in self._nodes else ():
                    pod = self._pods[pod_key]
                    if pod.owner == key and pod.group in state.groups:
                        self._mark(state, state.groups[pod.group], pod.node)
        for key in list(self._orphans):
            pod = self._pods.get(key)
            if pod is None or pod.owner is not None or not pod.ours:
                self._orphans.discard(key)
            elif not pod.terminating and not pod.deleting:
                self._delete(pod, "its owner no longer exists", plan)
        self._lowest_priority = min((s.p.spec.priority for s in self._states.values()), default=0)
        for _ in range(self.settings.max_rounds):
            if not self._dirty:
                break
            order = sorted(self._dirty, key=lambda k: self._states[k].p.rank())
            self._dirty = set()
            for key in order:
                state = self._states.get(key)
                if state is not None:
                    self._evaluate(state, plan)
        return plan

    def status(self, key: PlacementKey) -> PlacementStatus | None:
        """The last computed status of a placement."""
        state = self._states.get(key)
        return state.status if state else None

    def placements(self) -> list[Placement]:
        """Every known placement, highest priority first."""
        return sorted((s.p for s in self._states.values()), key=Placement.rank)

    def pods_of(self, key: PlacementKey) -> list[dict[str, Any]]:
        """The pods of a placement as planner sees them (for explain and tests).

        Returns:
            ``[{"name", "node", "group", "hash", "ready", "phase", "deleting",
            "assumed"}]`` sorted by name.
        """
        state = self._states.get(key)
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
        for name in sorted(self._nodes):
            node = self._nodes[name]
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
        state = self._states.get(key)
        if state is None:
            return {}
        return {
            value: (group.stats[0], group.reason)
            for value, group in state.groups.items()
            if value != _NO_GROUP
        }

    def node_usage(self, name: str) -> dict[str, int] | None:
        """Used and allocatable capacity of a node (for explain and tests)."""
        node = self._nodes.get(name)
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

    # --- node bookkeeping ----------------------------------------------------------

    def _index_labels(self, name: str, old: Mapping[str, str], new: Mapping[str, str]) -> None:
        if old == new:
            return
        self._sel_cache.clear()
        self._partitions.clear()
        self._group_cache.clear()
        for key, value in old.items():
            if new.get(key) != value:
                values = self._index.get(key, {})
                values.get(value, set()).discard(name)
                self._sorted.pop((key, value), None)
                if key not in new:
                    self._key_nodes.get(key, set()).discard(name)
        for key, value in new.items():
            if old.get(key) != value:
                self._index.setdefault(key, {}).setdefault(value, set()).add(name)
                self._key_nodes.setdefault(key, set()).add(name)
                self._sorted.pop((key, value), None)

    def _structure_changed(self, name: str) -> None:
        """A node appeared, vanished, or changed labels/taints."""
        self._group_cache.clear()
        self._partitions.clear()
        self._node_changes += 1
        if self._rebuild_all:
            return
        if self._node_changes > self.settings.bulk_node_changes:
            self._rebuild_all = True
            return
        node = self._nodes.get(name)
        on_node = {self._pods[k].owner for k in self._by_node.get(name, ())}
        for key, state in self._states.items():
            if (
                key in on_node
                or name in state.sel
                or (node is not None and self._matches(state, node))
            ):
                state.rebuild = True
                self._dirty.add(key)

    def _set_connectivity(self, node: _Node, offline_since: float | None) -> None:
        was = node.offline_since
        if (was is None) == (offline_since is None):
            return
        node.offline_since = offline_since
        owners: set[PlacementKey] = set()
        unready: dict[tuple[PlacementKey, str], int] = {}
        for key in node.pods:
            pod = self._pods[key]
            if pod.owner is None:
                continue
            owners.add(pod.owner)
            state = self._states.get(pod.owner)
            group = state.groups.get(pod.group) if state is not None else None
            if offline_since is not None and group is not None and not group.rolling:
                # Going offline changes no decision before the tolerance expires
                # (a deadline is armed below), only readiness: the group's Ready
                # count drops by the pods that were Ready here.
                slot = (pod.owner, pod.group)
                counted = pod.ready and pod.counts and pod.node in group.keep
                unready[slot] = unready.get(slot, 0) + (1 if counted else 0)
            else:
                self._touch(pod)
        for (owner, value), count in unready.items():
            state = self._states[owner]
            group = state.groups[value]
            if count and not group.dirty:
                if state.p.spec.mode is Mode.PER_NODE:
                    count = 1  # PerNode counts nodes with a Ready pod
                desired, placed, ready, updated = group.stats
                group.stats = (desired, placed, max(ready - count, 0), updated)
                state.stale_stats.add(value)
                self._dirty.add(owner)
        if offline_since is not None:
            for owner in owners:
                state = self._states[owner]
                if state.p.spec.mode is Mode.REPLICAS:
                    deadline = offline_since + state.p.spec.offline_toleration_seconds
                    heapq.heappush(self._deadlines, (deadline, owner, node.name))
        else:
            self._capacity_freed(node.name)

    def _capacity_freed(self, name: str) -> None:
        """Capacity may have appeared on ``name``: wake placements short of it."""
        node = self._nodes.get(name)
        if node is None or not self._wanting:
            return
        for key in list(self._wanting):
            state = self._states.get(key)
            # A node that just joined is not in ``sel`` until the next rebuild: its
            # selector match decides (a group capped while it held only offline
            # nodes must take the newcomer).
            if state is None or (name not in state.sel and not self._matches(state, node)):
                continue
            value = self._group_of(state, name)
            group = state.groups.get(value)
            if group is not None:
                group.cap = None
                self._mark(state, group, name)
                state.targets_stale = True
                self._dirty.add(key)

    # --- pod bookkeeping -----------------------------------------------------------

    def _requests(self, pod: _Pod, spec: Mapping[str, Any]) -> Resources:
        cache_key = (pod.owner_uid, pod.hash) if pod.owner_uid and pod.hash else None
        if cache_key is not None and cache_key in self._shapes:
            return self._shapes[cache_key]
        try:
            req = pod_shape({"spec": spec}, "spec").requests
        except InvalidSpec as exc:
            if not spec.get("containers"):
                req = Resources()
            else:
                raise InvalidObject("Pod", pod.name, str(exc)) from None
        if cache_key is not None:
            self._shapes[cache_key] = req
        return req

    def _bind(self, pod: _Pod) -> None:
        key = pod.key
        self._pods[key] = pod
        self._by_node.setdefault(pod.node, set()).add(key)
        if pod.owner_uid:
            self._by_owner_uid.setdefault(pod.owner_uid, set()).add(key)
            owner = self._by_uid.get(pod.owner_uid)
            if owner is not None:
                state = self._states[owner]
                pod.owner = owner
                pod.priority = state.p.spec.priority
                state.pods[key] = pod
                pod.group = self._group_of(state, pod.node)
                group = state.groups.get(pod.group)
                if group is None:
                    state.rebuild = True
                else:
                    group.pods[key] = pod
            elif pod.ours:
                self._orphans.add(key)
        node = self._nodes.get(pod.node)
        if node is not None:
            node.pods.add(key)
            self._charge(pod)
        self._touch(pod)
        self._arm(pod)

    def _arm(self, pod: _Pod) -> None:
        """Schedule the failover check of a replica bound to an offline node."""
        node = self._nodes.get(pod.node)
        if node is None or node.offline_since is None or pod.owner is None:
            return
        state = self._states.get(pod.owner)
        if state is not None and state.p.spec.mode is Mode.REPLICAS:
            deadline = node.offline_since + state.p.spec.offline_toleration_seconds
            heapq.heappush(self._deadlines, (deadline, pod.owner, node.name))

    def _unbind(self, pod: _Pod) -> None:
        key = pod.key
        if pod.charged:
            self._discharge(pod)
        self._pods.pop(key, None)
        self._orphans.discard(key)
        self._by_node.get(pod.node, set()).discard(key)
        if pod.owner_uid:
            self._by_owner_uid.get(pod.owner_uid, set()).discard(key)
        node = self._nodes.get(pod.node)
        if node is not None:
            node.pods.discard(key)
        if pod.owner is not None:
            state = self._states.get(pod.owner)
            if state is not None:
                state.pods.pop(key, None)
                group = state.groups.get(pod.group)
                if group is not None:
                    group.pods.pop(key, None)
            self._touch(pod)

    def _charge(self, pod: _Pod) -> None:
        if pod.charged or not pod.counts:
            return
        node = self._nodes.get(pod.node)
        if node is None:
            return
        req = pod.req
        node.ucpu += req.cpu
        node.umem += req.memory
        node.upods += 1
        for name, units in req.extended:
            node.uext[name] = node.uext.get(name, 0) + units
        if pod.owner is not None:
            node.prio[pod.priority] += 1
        pod.charged = True

    def _discharge(self, pod: _Pod) -> None:
        if not pod.charged:
            return
        node = self._nodes.get(pod.node)
        pod.charged = False
        if node is None:
            return
        req = pod.req
        node.ucpu -= req.cpu
        node.umem -= req.memory
        node.upods -= 1
        for name, units in req.extended:
            node.uext[name] = node.uext.get(name, 0) - units
        if pod.owner is not None:
            node.prio[pod.priority] -= 1
            if node.prio[pod.priority] <= 0:
                del node.prio[pod.priority]

    def _reprioritise(self, state: _State) -> None:
        priority = state.p.spec.priority
        for pod in state.pods.values():
            if pod.priority != priority:
                charged = pod.charged
                if charged:
                    self._discharge(pod)
                pod.priority = priority
                if charged:
                    self._charge(pod)

    def _touch(self, pod: _Pod) -> None:
        if pod.owner is None:
            return
        state = self._states.get(pod.owner)
        if state is None:
            return
        group = state.groups.get(pod.group)
        if group is None:
            state.rebuild = True
        else:
            self._mark(state, group, pod.node)
        self._dirty.add(pod.owner)

    @staticmethod
    def _mark(state: _State, group: _Group, node: str | None = None) -> None:
        """Mark a group for reconciliation (only ``node`` in it, when given and possible)."""
        if not group.dirty:
            group.dirty = True
            group.dirty_nodes = set() if node is not None else None
        elif node is None:
            group.dirty_nodes = None
        if node is not None and group.dirty_nodes is not None:
            group.dirty_nodes.add(node)
        state.dirty.add(group.value)

    # --- eligibility ---------------------------------------------------------------

    def _req_nodes(self, req: Requirement) -> set[str]:
        values = self._index.get(req.key, {})
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
            return self._all - excluded
        if op is Operator.EXISTS:
            return set(self._key_nodes.get(req.key, set()))
        if op is Operator.DOES_NOT_EXIST:
            return self._all - self._key_nodes.get(req.key, set())
        out = set()
        for value, names in values.items():
            if req.matches({req.key: value}):
                out |= names
        return out

    def _select(self, requirements: tuple[Requirement, ...]) -> frozenset[str]:
        cached = self._sel_cache.get(requirements)
        if cached is not None:
            return cached
        result: set[str] | None = None
        for req in sorted(requirements, key=lambda r: r.operator is not Operator.IN):
            nodes = self._req_nodes(req)
            result = nodes if result is None else result & nodes
            if not result:
                break
        out = frozenset(self._all if result is None else result)
        self._sel_cache[requirements] = out
        return out

    def _eligible(self, state: _State) -> frozenset[str] | set[str]:
        spec = state.p.spec
        shape = state.p.group_template("").shape
        reqs = spec.node_selector.requirements() + LabelSelector(shape.node_selector).requirements()
        sel: frozenset[str] | set[str] = self._select(reqs)
        if shape.affinity is not None:
            allowed: set[str] = set()
            for term in shape.affinity:
                names = self._select(term.expressions)
                allowed |= (
                    {n for n in names if term.matches(n, self._nodes[n].labels)}
                    if (term.node_names or term.excluded_names)
                    else names
                )
            sel &= allowed
        if shape.node_name is not None:
            sel &= {shape.node_name}
        return sel

    def _matches(self, state: _State, node: _Node) -> bool:
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

    def _group_of(self, state: _State, node_name: str) -> str:
        groups = state.p.spec.groups
        if groups is None:
            return ""
        node = self._nodes.get(node_name)
        if node is None:
            return _NO_GROUP
        return node.labels.get(groups.by_label, _NO_GROUP)

    def _rebuild(self, state: _State) -> None:
        p = state.p
        spec = p.spec
        sel = self._eligible(state)
        state.sel = sel
        old_groups = state.groups
        groups: dict[str, _Group] = {}
        if spec.groups is not None:
            by = spec.groups.by_label
            partition = self._partition(sel, by)
            if spec.groups.members is not None:
                values = [m.value for m in spec.groups.members if m.value in partition]
            else:
                values = list(partition)
            for value in values:
                groups[value] = self._make_group(state, value, partition[value], (by, value))
        elif sel:
            groups[""] = self._make_group(state, "", sel, None)
        for pod in state.pods.values():
            pod.group = self._group_of(state, pod.node)
            group = groups.get(pod.group)
            if group is None:
                group = _Group(
                    pod.group, p.group_template("" if pod.group == _NO_GROUP else pod.group)
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
        state.order = sorted(v for v in groups if v != _NO_GROUP)
        state.rebuild = False
        state.targets_stale = True

    def _partition(self, sel: frozenset[str] | set[str], by: str) -> dict[str, frozenset[str]]:
        """Split eligible nodes by the value of label ``by`` (cached per selector result)."""
        cache_key = (by, id(sel))
        cached = self._partitions.get(cache_key)
        if cached is not None and cached[0] is sel:
            return cached[1]
        index = self._index.get(by, {})
        whole_fleet = len(sel) == len(self._all)
        out: dict[str, frozenset[str]] = {}
        if whole_fleet or len(sel) * 4 >= len(self._key_nodes.get(by, ())):
            for value, members in index.items():
                nodes = members if whole_fleet else members & sel
                if nodes:
                    out[value] = frozenset(nodes)
        else:
            buckets: dict[str, set[str]] = {}
            for name in sel:
                value = self._nodes[name].labels.get(by)
                if value is not None:
                    buckets.setdefault(value, set()).add(name)
            out = {v: frozenset(n) for v, n in buckets.items()}
        if isinstance(sel, frozenset):
            self._partitions[cache_key] = (sel, out)
        return out

    def _make_group(
        self, state: _State, value: str, nodes: set[str], index_key: tuple[str, str] | None
    ) -> _Group:
        tmpl = state.p.group_template(value)
        group = _Group(value, tmpl)
        tolerations = tmpl.shape.tolerations
        whole = index_key is not None and len(nodes) == len(self._index[index_key[0]][index_key[1]])
        cache_key = (index_key, tolerations) if whole else None
        if cache_key is not None:
            cached = self._group_cache.get(cache_key)
            if cached is not None:
                group.new, group.keep, group.cands = cached
                return group
        new = keep = nodes
        tainted = nodes & self._tainted if self._tainted else ()
        if tainted:
            bad_new = set()
            bad_keep = set()
            for name in tainted:
                verdict = self._taint_verdict(tolerations, self._nodes[name].taints)
                if verdict:
                    bad_new.add(name)
                    if verdict == 2:
                        bad_keep.add(name)
            new = nodes - bad_new if bad_new else nodes
            keep = nodes - bad_keep if bad_keep else nodes
        group.new, group.keep = new, keep
        if new is nodes and whole:
            cands = self._sorted.get(index_key)
            if cands is None:
                cands = tuple(sorted(new))
                self._sorted[index_key] = cands
        else:
            cands = tuple(sorted(new))
        group.cands = cands
        if cache_key is not None:
            self._group_cache[cache_key] = (new, keep, cands)
        return group

    def _taint_verdict(self, tolerations: tuple, taints: tuple) -> int:
        """0: tolerated; 1: repels new pods (NoSchedule); 2: also evicts (NoExecute)."""
        key = (tolerations, taints)
        verdict = self._taint_verdicts.get(key)
        if verdict is None:
            if tolerates_all(tolerations, taints, _KEEP_EFFECTS) is not None:
                verdict = 2
            elif tolerates_all(tolerations, taints, _NEW_EFFECTS) is not None:
                verdict = 1
            else:
                verdict = 0
            self._taint_verdicts[key] = verdict
        return verdict

    # --- evaluation ----------------------------------------------------------------

    def _evaluate(self, state: _State, plan: Plan) -> None:
        if state.rebuild:
            self._rebuild(state)
        if state.p.spec.mode is Mode.PER_NODE:
            processed = set(state.dirty)
            for value in sorted(processed):
                group = state.groups.get(value)
                if group is not None:
                    self._reconcile_per_node(state, group, plan)
        else:
            processed = self._evaluate_replicas(state, plan)
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
            self._wanting.add(state.p.key)
        else:
            self._wanting.discard(state.p.key)
        self._update_status(state, plan, processed)

    def _evaluate_replicas(self, state: _State, plan: Plan) -> set[str]:
        if state.rebalance:
            for group in state.groups.values():
                group.cap = None
                self._mark(state, group)
            state.targets_stale = True
        if state.targets_stale:
            self._compute_targets(state)
        touched: dict[str, _Group] = {}
        for _ in range(len(state.groups) + 1):
            batch = sorted(v for v in state.dirty if v in state.groups and state.groups[v].dirty)
            if not batch:
                break
            capped = False
            for value in batch:
                group = state.groups[value]
                group.dirty = False
                touched[value] = group
                if self._create_phase(state, group, plan):
                    capped = True
            if not capped:
                break
            self._compute_targets(state)
        for value in state.blocked:
            if value in state.groups and value not in touched:
                touched[value] = state.groups[value]
        state.blocked = set()
        state.spare = None
        state.round = touched
        for value in sorted(touched):
            self._delete_phase(state, touched[value], plan)
        return set(touched)

    def _spare_ready(self, state: _State) -> int:
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
                    group.cls = self._classify(state, group)
                ready += self._count_ready(group.cls[0])
            else:
                ready += group.stats[2]
        state.spare = ready - target
        return state.spare

    def _compute_targets(self, state: _State) -> None:
        spec = state.p.spec
        groups = {v: g for v, g in state.groups.items() if v != _NO_GROUP and g.keep}
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
                share, left = _water_fill(
                    remaining,
                    weights,
                    {v: groups[v].cap for v in weights},
                    {v: len(groups[v].pods) for v in weights},
                )
                if spec.groups.max_skew is not None:
                    share, clipped = self._apply_skew(state, share, weights, spec.groups.max_skew)
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
                self._mark(state, group)
        state.unassigned = unassigned
        state.targets_stale = False

    def _apply_skew(
        self, state: _State, share: dict[str, int], weights: dict[str, int], max_skew: int
    ) -> tuple[dict[str, int], int]:
        active = [
            v
            for v in share
            if any(self._nodes[n].offline_since is None for n in state.groups[v].cands)
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

    def _classify(self, state: _State, group: _Group, pods: Iterable[_Pod] | None = None) -> tuple:
        """Sort a group's pods: ``(live, lost, soft, hard, redo)``.

        live: counting replicas; lost: on a node offline past the tolerance;
        soft: on a node that no longer matches (deleted once replaced); hard:
        to delete now, with the reason; redo: deletes to issue again.
        """
        now = self._now
        deadline = None
        if state.p.spec.mode is not Mode.PER_NODE:
            deadline = now - state.p.spec.offline_toleration_seconds
        nodes = self._nodes
        keep = group.keep
        no_group = group.value == _NO_GROUP
        live: list[_Pod] = []
        lost: list[_Pod] = []
        soft: list[_Pod] = []
        hard: list[tuple[_Pod, str]] = []
        redo: list[_Pod] = []
        append = live.append
        for pod in group.pods.values() if pods is None else pods:
            if pod.terminating or pod.deleting or pod.finished:
                if pod.terminating:
                    continue
                if pod.deleting:
                    if not pod.assumed and now - pod.deleting_at > self.settings.redelete_after_s:
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

    def _count_ready(self, pods: Iterable[_Pod]) -> int:
        nodes = self._nodes
        return sum(
            1
            for p in pods
            if p.ready and (node := nodes.get(p.node)) is not None and node.offline_since is None
        )

    def _away(self, pod: _Pod) -> bool:
        node = self._nodes.get(pod.node)
        return node is not None and node.offline_since is not None

    def _ready(self, pod: _Pod) -> bool:
        if not pod.ready:
            return False
        node = self._nodes.get(pod.node)
        return node is not None and node.offline_since is None

    def _create_phase(self, state: _State, group: _Group, plan: Plan) -> bool:
        """Place the group's missing replicas. Returns True when the group got capped."""
        if group.cls is None:
            group.cls = self._classify(state, group)
        live = group.cls[0]
        target = group.target
        if group.value == _NO_GROUP:
            return False
        current = group.tmpl.hash
        have = len(live) + len(group.created_now)
        fresh = sum(1 for p in live if p.hash == current) + len(group.created_now)
        _, surge = state.p.spec.update_strategy.budgets(target)
        want = max(0, min(target - fresh, target + surge - have))
        if state.rebalance:
            self._rebalance(state, group, live, plan)
        group.reason = ""
        placed = self._place(state, group, want, live, plan) if want else 0
        achieved = have + placed
        if achieved < target and (group.cap is None or group.cap > achieved):
            group.cap = achieved
            return (
                state.p.spec.groups is not None
                and state.p.spec.replicas_per_group is None
                and (group.value not in state.p.spec.fixed_replicas())
            )
        return False

    def _rebalance(self, state: _State, group: _Group, live: list[_Pod], plan: Plan) -> None:
        """Even out the group's nodes (explicit rebalance): move from fullest to emptiest."""
        counts: Counter[str] = Counter(p.node for p in live)
        online = [
            n
            for n in group.cands
            if self._nodes[n].offline_since is None and not self._nodes[n].unschedulable
        ]
        if not online:
            return
        for _ in range(len(live)):
            low = min(online, key=lambda n: (counts[n], n))
            high = max(counts, key=lambda n: (counts[n], n), default=None)
            if high is None or counts[high] - counts[low] <= 1:
                return
            if not self._nodes[low].fits(group.tmpl.shape.requests):
                online.remove(low)
                if not online:
                    return
                continue
            victim = next(p for p in live if p.node == high and not p.evict_first)
            victim.evict_first = True
            self._create(state, group, low, plan)
            counts[low] += 1
            counts[high] -= 1

    def _place(self, state: _State, group: _Group, want: int, live: list[_Pod], plan: Plan) -> int:
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
        start = self._rr % n
        nodes = self._nodes
        need = want
        while need:
            progressed = False
            for i in range(n):
                name = cands[(start + i) % n]
                count = counts.get(name, 0)
                if count != level:
                    continue
                node = nodes[name]
                if node.offline_since is not None or node.unschedulable or not node.fits(req):
                    continue
                self._create(state, group, name, plan)
                counts[name] = count + 1
                need -= 1
                progressed = True
                if not need:
                    break
            if not need or (not progressed and level >= top):
                break
            level += 1
            top = max(top, level)
        self._rr += want - need
        if need and self._can_preempt(state):
            need -= self._preempt(state, group, need, plan)
        if need:
            group.reason = self._why_short(group)
        return want - need

    def _why_short(self, group: _Group) -> str:
        req = group.tmpl.shape.requests
        offline = cordoned = 0
        lacking: Counter[str] = Counter()
        for name in group.cands:
            node = self._nodes[name]
            if node.offline_since is not None:
                offline += 1
            elif node.unschedulable:
                cordoned += 1
            else:
                lacking[(node.shortage(req) or "full").split(":")[0]] += 1
        parts = []
        if lacking:
            parts.extend(f"insufficient {res} on {k} node(s)" for res, k in lacking.most_common())
        if offline:
            parts.append(f"{offline} node(s) offline")
        if cordoned:
            parts.append(f"{cordoned} node(s) cordoned")
        return ", ".join(parts) or "no eligible node in this group"

    def _can_preempt(self, state: _State) -> bool:
        return self._lowest_priority < state.p.spec.priority

    def _preempt(
        self, state: _State, group: _Group, need: int, plan: Plan, only: str | None = None
    ) -> int:
        """Delete strictly lower priority pods to make room; returns replicas placed."""
        priority = state.p.spec.priority
        req = group.tmpl.shape.requests
        placed = 0
        for _ in range(need):
            best: tuple[tuple[int, int], str, list[_Pod]] | None = None
            for name in (only,) if only is not None else group.cands:
                node = self._nodes[name]
                if only is None and (node.offline_since is not None or node.unschedulable):
                    continue
                if not node.prio or min(node.prio) >= priority:
                    continue
                victims = sorted(
                    (
                        self._pods[k]
                        for k in node.pods
                        if self._pods[k].owner is not None
                        and self._pods[k].charged
                        and self._pods[k].priority < priority
                    ),
                    key=lambda p: (p.priority, -p.created),
                )
                chosen: list[_Pod] = []
                cpu, mem, pods = node.ucpu, node.umem, node.upods
                ext = dict(node.uext)
                for victim in victims:
                    if _fits(node, cpu, mem, pods, ext, req):
                        break
                    chosen.append(victim)
                    cpu -= victim.req.cpu
                    mem -= victim.req.memory
                    pods -= 1
                    for res, units in victim.req.extended:
                        ext[res] = ext.get(res, 0) - units
                if not chosen or not _fits(node, cpu, mem, pods, ext, req):
                    continue
                cost = (max(v.priority for v in chosen), len(chosen))
                if best is None or cost < best[0]:
                    best = (cost, name, chosen)
            if best is None:
                break
            _, name, chosen = best
            for victim in chosen:
                self._delete(victim, f"preempted by {state.p.key} (priority {priority})", plan)
                self._touch(victim)
            self._create(state, group, name, plan)
            placed += 1
        return placed

    def _create(self, state: _State, group: _Group, node_name: str, plan: Plan) -> _Pod:
        p = state.p
        tmpl = group.tmpl
        pod = _Pod.planned(
            p.namespace, self._pod_name(p), node_name, p, group.value, tmpl, self._now
        )
        key = (pod.namespace, pod.name)
        self._pods[key] = pod
        by_node = self._by_node.get(node_name)
        if by_node is None:
            by_node = self._by_node[node_name] = set()
        by_node.add(key)
        by_owner = self._by_owner_uid.get(p.uid)
        if by_owner is None:
            by_owner = self._by_owner_uid[p.uid] = set()
        by_owner.add(key)
        node = self._nodes[node_name]
        node.pods.add(key)
        state.pods[key] = pod
        group.pods[key] = pod
        group.created_now.append(pod)
        req = pod.req
        node.ucpu += req.cpu
        node.umem += req.memory
        node.upods += 1
        for res, units in req.extended:
            node.uext[res] = node.uext.get(res, 0) + units
        node.prio[pod.priority] += 1
        pod.charged = True
        plan.creates.append(PodCreate(p, group.value, node_name, pod.name, tmpl))
        return pod

    def _pod_name(self, p: Placement) -> str:
        prefix = p.name[:57].rstrip("-.")
        serial = self._serial.get(p.key)
        if serial is None:
            serial = int.from_bytes(p.uid.encode()[-4:] or b"\0", "big")
        pods = self._pods
        namespace = p.namespace
        while True:
            serial += 1
            s = (serial * 7_368_787) % _SUFFIX_SPACE
            suffix = _PAIRS[s % 729] + _PAIRS[(s // 729) % 729] + _SUFFIX_ALPHABET[s // 531441]
            name = f"{prefix}-{suffix}"
            if (namespace, name) not in pods:
                self._serial[p.key] = serial
                return name

    def _delete(self, pod: _Pod, reason: str, plan: Plan, force: bool = False) -> None:
        if pod.deleting and not (self._now - pod.deleting_at > self.settings.redelete_after_s):
            return
        if pod.assumed and pod.created == self._now:
            before = len(plan.creates)
            plan.creates = [
                c for c in plan.creates if (c.namespace, c.name) != (pod.namespace, pod.name)
            ]
            if len(plan.creates) != before:
                # Planned in this very round and never written: just forget it.
                self._touch(pod)
                self._unbind(pod)
                return
        pod.deleting = True
        pod.deleting_at = self._now
        if pod.charged:
            self._discharge(pod)
            self._capacity_freed(pod.node)
        force = force or pod.node not in self._nodes
        plan.deletes.append(PodDelete(pod.namespace, pod.name, pod.uid, pod.node, reason, force))

    def _delete_phase(self, state: _State, group: _Group, plan: Plan) -> None:
        if group.cls is None:
            group.cls = self._classify(state, group)
        live, _lost, soft, hard, redo = group.cls
        for pod in redo:
            self._delete(pod, "the earlier delete was not observed", plan)
        for pod, reason in hard:
            self._delete(pod, reason, plan)
        target = group.target
        current = group.tmpl.hash
        remaining = list(live) + list(group.created_now)
        ready = self._count_ready(remaining)
        unavailable, surge = state.p.spec.update_strategy.budgets(target)
        old = [p for p in live if p.hash != current]
        if old:
            fresh_unready = sum(1 for p in remaining if p.hash == current and not self._ready(p))
            budget = len(remaining) - (target - unavailable) - fresh_unready
            old.sort(key=lambda p: (self._ready(p), -p.created, p.name))
            for pod in old:
                if budget <= 0:
                    break
                self._delete(pod, "rolling update to the current template", plan)
                remaining.remove(pod)
                ready -= self._ready(pod)
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
                    self._ready(p),
                    -counts[p.node],
                    -p.created,
                    p.name,
                ),
            )
            for pod in victims[:surplus]:
                if pod.assumed and pod.created == self._now:
                    break
                # A Ready pod goes only while Ready ones remain for every target, in its
                # group and across the placement. A pod last seen Ready on a node that
                # is away again (a flapping node) may well be running: it goes once its
                # replacement is proven. A group short of Ready pods is looked at again
                # when one of its pods changes; one waiting for other groups is kept in
                # `blocked` to be looked at with them.
                if self._ready(pod):
                    if ready - 1 < target:
                        break
                    if self._spare_ready(state) <= 0:
                        state.blocked.add(group.value)
                        break
                elif pod.ready and self._away(pod):
                    if ready < target:
                        break
                    if self._spare_ready(state) < 0:
                        state.blocked.add(group.value)
                        break
                reason = (
                    f"surplus: node {pod.node} came back after its replica was replaced"
                    if pod.evict_first
                    else "surplus replica"
                )
                if self._ready(pod) and state.spare is not None:
                    state.spare -= 1
                self._delete(pod, reason, plan)
                remaining.remove(pod)
                ready -= self._ready(pod)
                counts[pod.node] -= 1
        if len(remaining) <= allowed:
            # No surplus left: a returned pod that is still here has rejoined.
            for pod in remaining:
                pod.evict_first = False
        for pod in soft:
            if not self._ready(pod) or ready >= target:
                self._delete(pod, f"node {pod.node} no longer matches the placement", plan)
        group.rolling = any(p.hash != current for p in remaining)
        group.stats = (
            target,
            len(remaining),
            ready,
            sum(1 for p in remaining if p.hash == current),
        )

    def _reconcile_per_node(self, state: _State, group: _Group, plan: Plan) -> None:
        """One pod per eligible node. Only the nodes that changed are looked at,
        unless an update is rolling or the group was rebuilt."""
        current = group.tmpl.hash
        names: Iterable[str] = group.cands
        pods: list[_Pod] | None = None
        full = group.dirty_nodes is None or group.rolling
        if not full:
            key, value = state.p.key, group.value
            dirty = group.dirty_nodes or set()
            names = sorted(n for n in dirty if n in group.new)
            pods = [
                pod
                for n in dirty
                for k in self._by_node.get(n, ())
                if (pod := self._pods[k]).owner == key and pod.group == value
            ]
            if any(p.hash != current and not p.deleting for p in pods):
                names, pods, full = group.cands, None, True
        live, _lost, soft, hard, redo = self._classify(state, group, pods)
        for pod in redo:
            self._delete(pod, "the earlier delete was not observed", plan)
        for pod, reason in hard:
            self._delete(pod, reason, plan)
        for pod in soft:
            self._delete(pod, f"node {pod.node} no longer matches the placement", plan)
        req = group.tmpl.shape.requests
        by_node: dict[str, list[_Pod]] = {}
        for pod in live:
            by_node.setdefault(pod.node, []).append(pod)
        desired = len(group.cands)
        unavailable_budget, surge_budget = state.p.spec.update_strategy.budgets(desired)
        if full:
            group.rolling = any(p.hash != current for p in live)
        # Only nodes that run a pod can be made unavailable by the update: a node
        # with no room for the pod does not hold the rollout up (DaemonSets do).
        unavailable_budget -= sum(
            1
            for name, pods in by_node.items()
            if self._nodes[name].offline_since is None and not any(self._ready(p) for p in pods)
        )
        surge_budget -= sum(1 for pods in by_node.values() if len(pods) > 1)
        short: list[str] = []
        for name in names:
            pods = by_node.get(name, [])
            node = self._nodes[name]
            if not pods:
                if node.fits(req) or (
                    self._can_preempt(state) and self._preempt(state, group, 1, plan, name)
                ):
                    if not (group.created_now and group.created_now[-1].node == name):
                        self._create(state, group, name, plan)
                else:
                    short.append(name)
                continue
            # Best first: Ready, then the newest template generation, then the oldest pod.
            fresh = sorted(
                (p for p in pods if p.hash == current),
                key=lambda p: (not self._ready(p), p.created, p.name),
            )
            stale = sorted(
                (p for p in pods if p.hash != current),
                key=lambda p: (not self._ready(p), -p.created, p.name),
            )
            for extra in fresh[1:]:
                self._delete(extra, "duplicate replica on the node", plan)
            if fresh:
                if stale and (self._ready(fresh[0]) or node.offline_since is not None):
                    for pod in stale:
                        self._delete(pod, "rolling update to the current template", plan)
                continue
            for extra in stale[1:]:
                self._delete(extra, "duplicate replica on the node", plan)
            if len(stale) > 1:
                surge_budget += 1
            if node.offline_since is not None:
                # Nothing runs there that anyone can reach: replace it now; the
                # node gets the new pod when it reconnects.
                self._delete(stale[0], "rolling update to the current template", plan)
                self._create(state, group, name, plan)
            elif surge_budget > 0 and node.fits(req):
                self._create(state, group, name, plan)
                surge_budget -= 1
            elif unavailable_budget > 0:
                self._delete(stale[0], "rolling update to the current template", plan)
                if node.fits(req):
                    self._create(state, group, name, plan)
                unavailable_budget -= 1
        if full:
            group.short_nodes = set(short)
        else:
            group.short_nodes.difference_update(names)
            group.short_nodes.update(short)
        group.short_nodes &= group.new
        lacking = group.short_nodes
        group.reason = (
            f"{len(lacking)} node(s) without room: "
            + ", ".join(sorted({self._nodes[n].shortage(req) or "full" for n in lacking}))
            if lacking
            else ""
        )
        if not lacking:
            group.cap = None
        alive = [p for p in group.pods.values() if p.counts and p.node in group.keep]
        group.stats = (
            desired,
            len({p.node for p in alive}),
            len({p.node for p in alive if self._ready(p)}),
            len({p.node for p in alive if p.hash == current}),
        )

    # --- status --------------------------------------------------------------------

    def _update_status(self, state: _State, plan: Plan, processed: set[str]) -> None:
        spec = state.p.spec
        totals = state.totals
        changed = state.gtuple is None
        for value in processed:
            if value == _NO_GROUP:
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
        reasons = [
            f"group {v}: {state.groups[v].reason}" if v else state.groups[v].reason
            for v in state.short
            if v in state.groups and state.groups[v].reason and v != _NO_GROUP
        ]
        if placed >= desired and not state.unassigned:
            placed_cond = ("True", "AllPlaced", f"{placed} of {desired} replicas placed")
        else:
            missing = desired - placed
            if not state.groups or not any(g.cands for g in state.groups.values()):
                reason = "NoEligibleNodes"
            elif (
                spec.groups is not None and spec.groups.max_skew is not None and (state.unassigned)
            ):
                reason = "SkewLimited"
            elif any("offline" in r for r in reasons) and not any(
                "insufficient" in r for r in reasons
            ):
                reason = "NodesOffline"
            else:
                reason = "InsufficientCapacity"
            detail = "; ".join(sorted(reasons)) or "no eligible node"
            placed_cond = ("False", reason, f"{missing} of {desired} replicas not placed: {detail}")
        available = not state.unavailable
        avail_cond = (
            ("True", "MinimumReplicasAvailable", f"{ready} of {desired} replicas ready")
            if available
            else ("False", "MinimumReplicasUnavailable", f"{ready} of {desired} replicas ready")
        )
        if updated >= placed and placed >= desired:
            upd_cond = ("True", "RolloutComplete", f"{updated} replicas run the current template")
        else:
            upd_cond = (
                "False",
                "RollingUpdate" if updated < placed else "Placing",
                f"{updated} of {desired} replicas run the current template",
            )
        conditions = []
        for type_, (status, reason, message) in (
            ("Placed", placed_cond),
            ("Available", avail_cond),
            ("Updated", upd_cond),
        ):
            old = state.conds.get(type_)
            since = old.last_transition if old is not None and old.status == status else self._now
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


def _stats_of(status: GroupStatus) -> tuple[int, int, int, int]:
    return (status.desired, status.placed, status.ready, status.updated)


def _fits(
    node: _Node, cpu: int, mem: int, pods: int, ext: Mapping[str, int], req: Resources
) -> bool:
    if cpu + req.cpu > node.cpu or mem + req.memory > node.mem or pods >= node.npods:
        return False
    return all(ext.get(k, 0) + v <= node.ext.get(k, 0) for k, v in req.extended)


def _water_fill(
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
