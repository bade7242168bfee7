"""Fleet-wide placement: which edge nodes run which workloads.

- :mod:`~cloudhub.placement.model`: the EdgePlacement resource as validated data
  (:mod:`~cloudhub.placement.shape`: what its pod template asks of a node).
- :mod:`~cloudhub.placement.planner`: the pure, incremental placement algorithm.
- :mod:`~cloudhub.placement.explain`: why each node was chosen or rejected.
- :mod:`~cloudhub.placement.importers`: Karmada, KubeEdge, OpenYurt and
  SuperEdge documents translated into EdgePlacements.
- :mod:`~cloudhub.placement.workloads`: Deployments and DaemonSets placed on
  the embedded API (no kube-scheduler there).
- :mod:`~cloudhub.placement.controller`: the controller (imported on its own:
  it pulls in the Kubernetes client through ``cloudhub.kube``).
- :mod:`~cloudhub.placement.cli`: the ``placement`` click command group.
- :mod:`~cloudhub.placement.settings` / :mod:`~cloudhub.placement.extension`: the
  ``placement`` settings group and the hub extension ``cloudhub serve`` installs
  (imported on its own, like the controller).
"""

from cloudhub.placement.errors import InvalidObject, InvalidSpec, PlacementError, TranslationError
from cloudhub.placement.explain import explain, format_explanations
from cloudhub.placement.importers import ImportResult, import_documents, import_files
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
from cloudhub.placement.planner import NodeView, Planner, PlannerSettings, compute_plan
from cloudhub.placement.settings import PlacementSettings
from cloudhub.placement.workloads import placement_from_workload, targets_edge

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
    "ImportResult",
    "InvalidObject",
    "InvalidSpec",
    "Mode",
    "NodeExplanation",
    "NodeView",
    "Placement",
    "PlacementError",
    "PlacementKey",
    "PlacementSettings",
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
    "explain",
    "format_explanations",
    "import_documents",
    "import_files",
    "offline_since",
    "parse_node",
    "parse_placement",
    "parse_spec",
    "placement_from_workload",
    "targets_edge",
]
