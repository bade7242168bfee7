"""Node and pod metrics on the edge: sampling, store-and-forward, delivery.

Pieces, from the host to the wire:

- :class:`Sampler` (with :class:`HostReader` and the runtime's
  :class:`ContainerStatsSource`) makes a :class:`~protocol.metrics_codec.Sample` every
  ``sample_interval_s``.
- :class:`MetricsForwarder` buffers samples within a byte budget over a
  :class:`MetricsStorage` (the agent store, ``edgeagent.store.metrics``;
  :class:`MemoryMetricsStorage` for tests),
  down-sampling the oldest when offline, and seals batches with a stable identity.
- :class:`MetricsService` runs the sampling loop and says when a batch is due; the
  uplink's metrics source (``edgeagent.uplink.sources.metrics``) seals and delivers.

``psutil`` is imported at the first sample, not with this package.

Names are imported on first use (PEP 562), so that the agent's settings can import
``edgeagent.metrics.settings`` without loading the sampler, the codec and the protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeagent.lazy import lazy_exports

if TYPE_CHECKING:
    from edgeagent.metrics.errors import (
        MetricsError,
        MetricsSettingsError,
        SamplingError,
    )
    from edgeagent.metrics.forwarder import (
        ForwarderStats,
        MetricsForwarder,
    )
    from edgeagent.metrics.host import (
        FilesystemUsage,
        HostReader,
        HostReading,
    )
    from edgeagent.metrics.memory import MemoryMetricsStorage
    from edgeagent.metrics.sampler import (
        Sampler,
    )
    from edgeagent.metrics.service import (
        MetricsService,
    )
    from edgeagent.metrics.settings import (
        MetricsSettings,
    )
    from edgeagent.metrics.sysfs import (
        GpuReading,
        GpuSource,
        find_gpus,
        read_thermal_zones,
    )
    from edgeagent.runtime.stats import ContainerStats, ContainerStatsSource
    from edgeagent.store.metrics import (
        ROW_OVERHEAD_BYTES,
        MetricsStorage,
        SealedBatch,
        StoredSample,
        StreamState,
    )

_WHERE = {
    # the runtime's (edgeagent.runtime.stats), which the sampler asks for container stats
    "ContainerStats": "sampler",
    "ContainerStatsSource": "sampler",
    "MetricsError": "errors",
    "MetricsSettingsError": "errors",
    "SamplingError": "errors",
    "ForwarderStats": "forwarder",
    "MetricsForwarder": "forwarder",
    "FilesystemUsage": "host",
    "HostReader": "host",
    "HostReading": "host",
    "Sampler": "sampler",
    "MetricsService": "service",
    "MetricsSettings": "settings",
    "MemoryMetricsStorage": "memory",
    # the buffer's records and interface live with their tables in edgeagent.store.metrics
    "ROW_OVERHEAD_BYTES": "forwarder",
    "MetricsStorage": "forwarder",
    "SealedBatch": "forwarder",
    "StoredSample": "forwarder",
    "StreamState": "forwarder",
    "GpuReading": "sysfs",
    "GpuSource": "sysfs",
    "find_gpus": "sysfs",
    "read_thermal_zones": "sysfs",
}

__all__ = [
    "ROW_OVERHEAD_BYTES",
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
    "Sampler",
    "SamplingError",
    "SealedBatch",
    "StoredSample",
    "StreamState",
    "find_gpus",
    "read_thermal_zones",
]


__getattr__, __dir__ = lazy_exports(globals(), _WHERE)
