"""Node and pod metrics on the edge: sampling, store-and-forward, delivery.

Pieces, from the host to the wire:

- :class:`Sampler` (with :class:`HostReader` and the runtime's
  :class:`ContainerStatsSource`) makes a :class:`~protocol.metrics_codec.Sample` every
  ``sample_interval_s``.
- :class:`MetricsForwarder` buffers samples within a byte budget over a
  :class:`MetricsStorage` (the agent store; :class:`MemoryMetricsStorage` for tests),
  down-sampling the oldest when offline, and seals batches with a stable identity.
- :class:`MetricsService` runs both loops and hands sealed batches to a
  :class:`MetricsUplink`.

``psutil`` is imported at the first sample, not with this package.
"""

from edgeagent.metrics.containers import (
    CgroupReader,
    ContainerStats,
    ContainerStatsSource,
    ResourceUsage,
    process_tree_usage,
    usage_from_docker_stats,
)
from edgeagent.metrics.errors import MetricsError, MetricsSettingsError, SamplingError
from edgeagent.metrics.forwarder import ForwarderStats, MetricsForwarder
from edgeagent.metrics.host import FilesystemUsage, HostReader, HostReading
from edgeagent.metrics.sampler import Sampler
from edgeagent.metrics.service import MetricsService, MetricsUplink
from edgeagent.metrics.settings import MetricsSettings
from edgeagent.metrics.storage import (
    ROW_OVERHEAD_BYTES,
    MemoryMetricsStorage,
    MetricsStorage,
    SealedBatch,
    StoredSample,
    StreamState,
)
from edgeagent.metrics.sysfs import GpuReading, GpuSource, find_gpus, read_thermal_zones

__all__ = [
    "ROW_OVERHEAD_BYTES",
    "CgroupReader",
    "ContainerStats",
    "ContainerStatsSource",
    "FilesystemUsage",
    "ForwarderStats",
    "GpuReading",
    "GpuSource",
    "HostReader",
    "HostReading",
    "MemoryMetricsStorage",
    "MetricsError",
    "MetricsForwarder",
    "MetricsService",
    "MetricsSettings",
    "MetricsSettingsError",
    "MetricsStorage",
    "MetricsUplink",
    "ResourceUsage",
    "Sampler",
    "SamplingError",
    "SealedBatch",
    "StoredSample",
    "StreamState",
    "find_gpus",
    "process_tree_usage",
    "read_thermal_zones",
    "usage_from_docker_stats",
]
