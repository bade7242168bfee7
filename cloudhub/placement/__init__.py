"""Fleet-wide placement: which edge nodes run which workloads.

- :mod:`~cloudhub.placement.model`: the EdgePlacement resource as validated data.
- :mod:`~cloudhub.placement.planner`: the pure, incremental placement algorithm.
- :mod:`~cloudhub.placement.explain`: why each node was chosen or rejected.
- :mod:`~cloudhub.placement.importers`: Karmada, KubeEdge, OpenYurt and
  SuperEdge documents translated into EdgePlacements.
- :mod:`~cloudhub.placement.workloads`: Deployments and DaemonSets placed on
  the embedded API (no kube-scheduler there).
"""

from cloudhub.placement.errors import InvalidObject, InvalidSpec, PlacementError, TranslationError
from cloudhub.placement.model import (
    API_GROUP,
    API_VERSION,
    KIND,
    LABEL_GROUP,
    LABEL_PLACEMENT,
    LABEL_TEMPLATE_HASH,
    PLURAL,
    Mode,
    Placement,
    PlacementKey,
    PlacementSpec,
    Spread,
    parse_placement,
    parse_spec,
)
from cloudhub.placement.nodes import offline_since, parse_node
from cloudhub.placement.plan import (
    Condition,
    GroupStatus,
    NodeExplanation,
    PlacementStatus,
    Plan,
    PodCreate,
    PodDelete,
)
from cloudhub.placement.planner import Planner, PlannerSettings, compute_plan

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "LABEL_GROUP",
    "LABEL_PLACEMENT",
    "LABEL_TEMPLATE_HASH",
    "PLURAL",
    "Condition",
    "GroupStatus",
    "InvalidObject",
    "InvalidSpec",
    "Mode",
    "NodeExplanation",
    "Placement",
    "PlacementError",
    "PlacementKey",
    "PlacementSpec",
    "PlacementStatus",
    "Plan",
    "Planner",
    "PlannerSettings",
    "PodCreate",
    "PodDelete",
    "Spread",
    "TranslationError",
    "compute_plan",
    "offline_since",
    "parse_node",
    "parse_placement",
    "parse_spec",
]
