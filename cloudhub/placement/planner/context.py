"""What the placement phases share besides the placement they work on."""

from __future__ import annotations

from cloudhub.placement.model import PlacementKey
from cloudhub.placement.planner.index import FleetIndex
from cloudhub.placement.planner.ledger import Ledger
from cloudhub.placement.planner.state import NodeRecord, PlannerSettings

__all__ = ["Context"]


class Context:
    """The fleet index, the pod ledger, the settings, and the clock of the running plan.

    Every phase function takes the placement's state and this object; the
    :class:`~cloudhub.placement.planner.planner.Planner` owns the one instance.

    Attributes:
        index: nodes by name and label, eligibility.
        ledger: pods, placements, what is dirty.
        nodes: ``index.nodes`` (the same dict, read on every hot path).
        settings: the planner's tunables.
        now: the time of the running plan, epoch seconds.
        rr: round-robin offset into a group's candidates, so that placements with
            equal counts spread over the fleet.
        serial: per placement, the serial of its last generated pod name.
        lowest_priority: the lowest priority of any placement (preemption is only
            tried by placements above it).
        pulled: per placement with ``updateStrategy.prePull``, the nodes that pulled its
            current template's images (absent: none known yet).
    """

    __slots__ = (
        "index",
        "ledger",
        "lowest_priority",
        "nodes",
        "now",
        "pulled",
        "rr",
        "serial",
        "settings",
    )

    def __init__(self, settings: PlannerSettings) -> None:
        self.settings = settings
        self.index = FleetIndex()
        self.ledger = Ledger(self.index)
        self.nodes: dict[str, NodeRecord] = self.index.nodes
        self.now = 0.0
        self.rr = 0
        self.serial: dict[PlacementKey, int] = {}
        self.lowest_priority = 0
        self.pulled: dict[PlacementKey, frozenset[str]] = {}

    def waits_for_pull(self, key: PlacementKey, prepull: bool, node: str) -> bool:
        """Whether a rolling update of placement ``key`` must not replace its pod on
        ``node`` yet: ``prepull`` is set and ``node`` has not pulled the images."""
        return prepull and node not in self.pulled.get(key, frozenset())
