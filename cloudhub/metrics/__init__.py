"""Edge metrics on the hub: ingest, Prometheus exposition, node pressure, metrics.k8s.io.

- :class:`EdgeMetricsStore` takes ``metrics_batch`` bodies (de-duplicated by batch
  identity) and keeps the latest samples per node and container.
- :class:`PodIndex`, fed from the pod informer, maps container keys back to names.
- :class:`EdgeMetricsExposition` renders them for Prometheus (text format, cached per
  node); :class:`EdgeMetricsCollector` is the same as a prometheus-client collector.
- :func:`evaluate_pressure` gives the MemoryPressure / DiskPressure conditions.
- :class:`ResourceMetricsAPI` builds NodeMetrics / PodMetrics for ``kubectl top``.
- :func:`metrics_extension` installs all of it into the hub (``cloudhub serve`` does),
  configured by :class:`HubMetricsSettings` (the ``metrics`` settings group).
"""

from cloudhub.metrics.conditions import (
    NodeUsage,
    PressureState,
    PressureThresholds,
    evaluate_pressure,
    node_usage,
)
from cloudhub.metrics.errors import BatchRejected, MetricsError, MetricsNotFound
from cloudhub.metrics.exposition import FAMILIES, EdgeMetricsCollector, EdgeMetricsExposition
from cloudhub.metrics.extension import MetricsExtension, ResourceMetricsGroup, metrics_extension
from cloudhub.metrics.pods import ContainerName, PodIndex
from cloudhub.metrics.resource_metrics import ResourceMetricsAPI
from cloudhub.metrics.settings import HubMetricsSettings
from cloudhub.metrics.store import (
    ContainerState,
    EdgeMetricsStore,
    IngestResult,
    NodeState,
    Rate,
)

__all__ = [
    "FAMILIES",
    "BatchRejected",
    "ContainerName",
    "ContainerState",
    "EdgeMetricsCollector",
    "EdgeMetricsExposition",
    "EdgeMetricsStore",
    "HubMetricsSettings",
    "IngestResult",
    "MetricsError",
    "MetricsExtension",
    "MetricsNotFound",
    "NodeState",
    "NodeUsage",
    "PodIndex",
    "PressureState",
    "PressureThresholds",
    "Rate",
    "ResourceMetricsAPI",
    "ResourceMetricsGroup",
    "evaluate_pressure",
    "metrics_extension",
    "node_usage",
]
