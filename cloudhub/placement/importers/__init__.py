"""Translate other systems' placement documents into EdgePlacements.

One module per source system, each with the rules of its translation:

- :mod:`~cloudhub.placement.importers.karmada`: ``PropagationPolicy`` and
  ``ClusterPropagationPolicy``, with ``OverridePolicy``/``ClusterOverridePolicy``;
- :mod:`~cloudhub.placement.importers.kubeedge`: ``EdgeApplication`` and ``NodeGroup``;
- :mod:`~cloudhub.placement.importers.openyurt`: ``NodePool``, ``UnitedDeployment`` and
  ``YurtAppSet``;
- :mod:`~cloudhub.placement.importers.superedge`: ``DeploymentGrid``;
- :mod:`~cloudhub.placement.importers.common`: the documents, the result and the
  overriders they share; :mod:`~cloudhub.placement.importers.translate`: the entry points.

Each document says what it could not translate (:class:`Dropped`, marked when leaving it
out changes where or what runs). Node groups themselves (NodeGroup, NodePool) are node
labels in EdgeFleet: their import says how to label nodes.
"""

from cloudhub.placement.importers.common import (
    GROUP_LABEL,
    Dropped,
    ImportResult,
    load_documents,
)
from cloudhub.placement.importers.karmada import FIELD_LABELS, PROVIDER_LABEL
from cloudhub.placement.importers.kubeedge import KUBEEDGE_GROUP_LABEL
from cloudhub.placement.importers.openyurt import OPENYURT_POOL_LABEL
from cloudhub.placement.importers.translate import import_documents, import_files

__all__ = [
    "FIELD_LABELS",
    "GROUP_LABEL",
    "KUBEEDGE_GROUP_LABEL",
    "OPENYURT_POOL_LABEL",
    "PROVIDER_LABEL",
    "Dropped",
    "ImportResult",
    "import_documents",
    "import_files",
    "load_documents",
]
