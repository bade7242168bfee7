"""What one placement round decides: pods to create and delete, and statuses.

A :class:`Plan` holds lightweight records; the controller renders each
:class:`PodCreate` into Pod JSON (:meth:`PodCreate.render`) when it writes
it, so that the computation stays cheap at fleet scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cloudhub.placement.model import GroupTemplate, Placement, PlacementKey
from cloudhub.placement.pods import render_pod

__all__ = [
    "Condition",
    "GroupStatus",
    "NodeExplanation",
    "PlacementStatus",
    "Plan",
    "PodCreate",
    "PodDelete",
]


@dataclass(slots=True)
class PodCreate:
    """A pod to create, bound to a node.

    Attributes:
        placement: the placement it belongs to.
        group: its group ("" without groups).
        node: the node it is bound to.
        name: the pod name (unique among the namespace's known pods).
        template: the group's effective template.
    """

    placement: Placement
    group: str
    node: str
    name: str
    template: GroupTemplate

    @property
    def namespace(self) -> str:
        return self.placement.namespace

    def render(self) -> dict[str, Any]:
        """The Pod JSON to POST (see :func:`cloudhub.placement.pods.render_pod`)."""
        return render_pod(self.placement, self.group, self.node, self.name, self.template)


@dataclass(frozen=True, slots=True)
class PodDelete:
    """A pod to delete.

    Attributes:
        namespace, name, uid: the pod (uid as a delete precondition; "" when
            the pod was only planned and never observed).
        node: the node it is bound to.
        reason: why, in words (``"surplus after node edge-3 came back"``).
        force: delete at once (grace period 0): no kubelet will confirm it
            (its node no longer exists).
    """

    namespace: str
    name: str
    uid: str
    node: str
    reason: str
    force: bool = False


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """Replica counts of one group.

    Attributes:
        name: the group's label value ("" without groups).
        desired: replicas the group should run.
        placed: replicas bound to a node that counts (online, or offline
            within the tolerance).
        ready: placed replicas that are Ready on an online node.
        updated: placed replicas running the current template.
    """

    name: str
    desired: int
    placed: int
    ready: int
    updated: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "desired": self.desired,
            "placed": self.placed,
            "ready": self.ready,
            "updated": self.updated,
        }


@dataclass(frozen=True, slots=True)
class Condition:
    """A status condition (``metav1.Condition``), times in epoch seconds."""

    type: str
    status: str
    reason: str
    message: str
    last_transition: float

    def to_json(self) -> dict[str, Any]:
        from datetime import datetime, timezone

        stamp = datetime.fromtimestamp(self.last_transition, timezone.utc)
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


@dataclass(frozen=True, slots=True)
class PlacementStatus:
    """The status subresource of a placement.

    Attributes:
        observed_generation: the spec generation this status reflects.
        desired, placed, ready, updated: totals over the groups.
        groups: per group counts, sorted by name.
        conditions: ``Placed``, ``Available`` and ``Updated``.
    """

    observed_generation: int
    desired: int
    placed: int
    ready: int
    updated: int
    groups: tuple[GroupStatus, ...]
    conditions: tuple[Condition, ...]

    def condition(self, type_: str) -> Condition | None:
        """The condition of that type, if present."""
        for condition in self.conditions:
            if condition.type == type_:
                return condition
        return None

    def to_json(self) -> dict[str, Any]:
        """The ``status`` JSON object."""
        return {
            "observedGeneration": self.observed_generation,
            "desired": self.desired,
            "placed": self.placed,
            "ready": self.ready,
            "updated": self.updated,
            "groups": [g.to_json() for g in self.groups],
            "conditions": [c.to_json() for c in self.conditions],
        }


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    """Why one node does or does not run a placement's replicas.

    Attributes:
        node: node name.
        chosen: whether the node runs (or is about to run) replicas.
        replicas: how many replicas of the placement are bound to it.
        group: the node's group ("" without groups; None when it has none).
        reasons: the reasons, most important first.
    """

    node: str
    chosen: bool
    replicas: int
    group: str | None
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        verdict = (
            f"chosen ({self.replicas} replica{'s' if self.replicas != 1 else ''})"
            if (self.chosen)
            else "rejected"
        )
        return f"{self.node}: {verdict}: {'; '.join(self.reasons)}"


@dataclass(slots=True)
class Plan:
    """The outcome of one round.

    Attributes:
        creates: pods to create, in the order they were decided.
        deletes: pods to delete.
        statuses: the new status of every placement whose status changed.
    """

    creates: list[PodCreate] = field(default_factory=list)
    deletes: list[PodDelete] = field(default_factory=list)
    statuses: dict[PlacementKey, PlacementStatus] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when there is nothing to write (no pods, no status)."""
        return not self.creates and not self.deletes and not self.statuses
