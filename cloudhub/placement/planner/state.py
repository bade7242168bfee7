"""What the planner remembers: nodes, pods, and per placement its groups and status.

These are plain mutable records with ``__slots__`` (a 100,000-replica fleet holds that
many :class:`PodRecord` objects); the phases in the other modules of this package read
and change them. :class:`NodeView` and :class:`PlannerSettings` are the public ones.

Every record is keyed the way the API keys the object: nodes by name, pods by
``(namespace, name)``, placements by :class:`~cloudhub.placement.model.PlacementKey`,
groups by the value of the placement's ``groups.byLabel`` label ("" without groups,
:data:`NO_GROUP` for pods on nodes in no group of the placement).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from cloudhub.placement.model import (
    GroupTemplate,
    Placement,
    PlacementKey,
)
from cloudhub.placement.nodes import NodeFacts
from cloudhub.placement.plan import Condition, GroupStatus, PlacementStatus
from cloudhub.placement.selectors import Taint
from cloudhub.placement.shape import Resources

__all__ = [
    "NO_GROUP",
    "GroupState",
    "NodeRecord",
    "NodeView",
    "PlacementState",
    "PlannerSettings",
    "PodRecord",
    "mark",
]

NO_GROUP = "\x00no-group"
"""The group of a placement's pods on nodes that are in none of its groups (a label that
changed, a node that left the selector): they are deleted once replaced."""


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


class NodeRecord:
    """A node: its facts (allocatable in millicores/bytes/units), what is charged to it
    (``ucpu``, ``umem``, ``upods``, ``uext``), the pods bound to it, how many of them
    each placement priority holds (``prio``, for preemption) and since when it is
    offline (epoch seconds, None while online)."""

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
        """Take new facts (labels, taints, cordon, allocatable); charges stay."""
        self.labels = dict(facts.labels)
        self.taints = facts.taints
        self.unschedulable = facts.unschedulable
        self.cpu = facts.cpu
        self.mem = facts.memory
        self.npods = facts.pods
        self.ext = dict(facts.extended)


class PodRecord:
    """A pod bound to a node: as observed, or planned here and assumed until observed.

    ``owner`` is the placement that owns it (by controller ownerReference uid), or None;
    ``ours`` says placement labelled and owns it (and so garbage-collects it);
    ``charged`` whether its requests are counted on its node; ``deleting`` whether this
    planner decided its deletion (at ``deleting_at``); ``evict_first`` marks a returned
    or rebalanced pod that goes before the others.
    """

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
    ) -> PodRecord:
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


class GroupState:
    """One group of a placement: its eligible nodes (``new`` for new pods, ``keep`` for
    existing ones, ``cands`` the sorted candidates), its pods, its target, the cap it
    reached when short of capacity, and its last ``stats``
    ``(desired, placed, ready, updated)``. ``dirty``/``dirty_nodes`` say what the next
    evaluation looks at; ``cls`` caches its pods' classification for one evaluation."""

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
        self.pods: dict[tuple[str, str], PodRecord] = {}
        self.target = 0
        self.cap: int | None = None
        self.dirty = True
        self.dirty_nodes: set[str] | None = None
        self.rolling = True
        self.short_nodes: set[str] = set()
        self.reason = ""
        self.stats = (0, 0, 0, 0)
        self.cls: tuple | None = None
        self.created_now: list[PodRecord] = []


class PlacementState:
    """One placement: the parsed object, its pods and groups, what is dirty in it, the
    eligible nodes (``sel``), the status last computed and the totals behind it."""

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
        self.pods: dict[tuple[str, str], PodRecord] = {}
        self.groups: dict[str, GroupState] = {}
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
        self.spare: int | None = None  # computed when first needed (see spare_ready)
        self.round: Mapping[str, GroupState] = {}


def mark(state: PlacementState, group: GroupState, node: str | None = None) -> None:
    """Mark a group for reconciliation (only ``node`` in it, when given and possible)."""
    if not group.dirty:
        group.dirty = True
        group.dirty_nodes = set() if node is not None else None
    elif node is None:
        group.dirty_nodes = None
    if node is not None and group.dirty_nodes is not None:
        group.dirty_nodes.add(node)
    state.dirty.add(group.value)
