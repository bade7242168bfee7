"""Fleet-wide placement as pure, incremental computation (no I/O, no clock).

:class:`Planner` is the entry point (:mod:`~cloudhub.placement.planner.planner` says
which module holds which rule); :func:`compute_plan` places a fleet from scratch.
"""

from cloudhub.placement.planner.planner import MANAGED_KINDS, Planner, compute_plan
from cloudhub.placement.planner.state import NodeView, PlannerSettings

__all__ = ["MANAGED_KINDS", "NodeView", "Planner", "PlannerSettings", "compute_plan"]
