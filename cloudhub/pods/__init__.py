"""Pods down, status up: what edges are sent about pods and how their reports are written."""

from cloudhub.pods.handlers import PodHandlers
from cloudhub.pods.source import POD_INDEXERS, PodSource
from cloudhub.pods.status import EDGE_OWNED_FIELDS, merge_status
from cloudhub.pods.writer import PodReportWriter

__all__ = [
    "EDGE_OWNED_FIELDS",
    "POD_INDEXERS",
    "PodHandlers",
    "PodReportWriter",
    "PodSource",
    "merge_status",
]
