"""The sampler: node and container readings → one :class:`~protocol.metrics_codec.Sample`.

Counters leave here as increments over the sample's window (see
:mod:`protocol.metrics_codec`), so the sampler remembers the previous cumulative values:
per network interface (an interface that appears counts from then on, one that goes away
stops counting) and per container instance (a new container id means a restart: its
whole usage so far is the increment). A counter that goes backwards on the same source
(a CPU taken offline) gives an increment of 0.

The window is measured on the monotonic clock, the timestamp on the wall clock, so an
NTP step (a Raspberry Pi has no RTC and boots with a stale clock) moves timestamps but
never distorts rates.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from edgeagent.metrics.host import HostReader, HostReading
from edgeagent.metrics.settings import MetricsSettings
from edgeagent.runtime.stats import ContainerStats, ContainerStatsSource
from protocol.metrics_codec import Metric, Sample, SeriesKey, container_key

__all__ = ["Sampler", "sample_values_from_host"]

log = logging.getLogger(__name__)

M = Metric
_FS_SERIES = {
    "root": (M.NODE_FS_ROOT_CAPACITY_KIB, M.NODE_FS_ROOT_AVAILABLE_KIB, M.NODE_FS_ROOT_USED_KIB),
    "state": (
        M.NODE_FS_STATE_CAPACITY_KIB,
        M.NODE_FS_STATE_AVAILABLE_KIB,
        M.NODE_FS_STATE_USED_KIB,
    ),
}


def sample_values_from_host(reading: HostReading) -> dict[SeriesKey, int]:
    """Map a host reading's gauges onto series keys (counters are left to the sampler).

    The node working set is not sent: it is capacity - available, which the hub derives.
    """
    values: dict[SeriesKey, int] = {
        (M.NODE_CPU_CAPACITY_MILLICORES, None): reading.cpu_capacity_millicores,
        (M.NODE_MEMORY_AVAILABLE_KIB, None): reading.memory_available_kib,
        (M.NODE_MEMORY_CAPACITY_KIB, None): reading.memory_capacity_kib,
        (M.NODE_LOAD1_CENTI, None): reading.load_centi[0],
        (M.NODE_LOAD5_CENTI, None): reading.load_centi[1],
        (M.NODE_LOAD15_CENTI, None): reading.load_centi[2],
        (M.NODE_UPTIME_SECONDS, None): reading.uptime_s,
    }
    for name, fs in reading.filesystems.items():
        capacity, available, used = _FS_SERIES[name]
        values[(capacity, None)] = fs.capacity_kib
        values[(available, None)] = fs.available_kib
        values[(used, None)] = fs.used_kib
    for zone, decicelsius in reading.temperatures.items():
        values[(M.NODE_TEMPERATURE_DECICELSIUS, zone)] = decicelsius
    for name, gpu in reading.gpus.items():
        for metric, value in (
            (M.NODE_GPU_UTILIZATION_PERMILLE, gpu.utilization_permille),
            (M.NODE_GPU_MEMORY_USED_KIB, gpu.memory_used_kib),
            (M.NODE_GPU_MEMORY_CAPACITY_KIB, gpu.memory_capacity_kib),
            (M.NODE_GPU_FREQUENCY_MHZ, gpu.frequency_mhz),
        ):
            if value is not None:
                values[(metric, name)] = value
    return values


def _increment(cur: int, prev: int | None) -> int | None:
    if prev is None:
        return None
    return cur - prev if cur >= prev else 0


class Sampler:
    """Produces one sample per call; keeps the previous cumulative values.

    Args:
        settings: the metrics settings.
        containers: the runtime's stats source, or ``None`` on a node without pods
            support (only node series are sampled).
        host: the node reader (default: a :class:`HostReader` of ``settings``).
    """

    def __init__(
        self,
        settings: MetricsSettings,
        containers: ContainerStatsSource | None = None,
        host: HostReader | None = None,
    ) -> None:
        self._host = host if host is not None else HostReader(settings)
        self._containers = containers
        self._prev_mono: float | None = None
        self._prev_cpu_ms: int | None = None
        self._prev_net: dict[str, tuple[int, int]] = {}
        self._prev_containers: dict[int, tuple[str, int]] | None = None
        self._container_error: str | None = None

    async def sample(self, *, wall_ms: int, mono_s: float) -> Sample:
        """Read the node and the containers and return the sample.

        Args:
            wall_ms: wall-clock time (ms since the epoch): the sample's ``t_ms``.
            mono_s: monotonic time (s): the window is the difference from the previous
                call's.

        Returns:
            The sample. The first one (and one after the monotonic clock went backwards)
            has ``window_ms == 0`` and no counters.

        Raises:
            SamplingError: ``/proc`` or the root filesystem could not be read; the caller
                skips this sample (the next one covers the longer window).
        """
        reading = self._host.read(wall_ms / 1000)
        stats = await self._container_stats()
        window_ms = 0
        if self._prev_mono is not None and mono_s > self._prev_mono:
            window_ms = round((mono_s - self._prev_mono) * 1000)
        values = sample_values_from_host(reading)
        counting = window_ms > 0

        cpu = _increment(reading.cpu_busy_ms, self._prev_cpu_ms)
        if counting and cpu is not None:
            values[(M.NODE_CPU_USAGE_MS, None)] = cpu
        rx_total = tx_total = 0
        for name, (rx, tx) in reading.network.items():
            prev = self._prev_net.get(name)
            if prev is not None:
                rx_total += rx - prev[0] if rx >= prev[0] else 0
                tx_total += tx - prev[1] if tx >= prev[1] else 0
        if counting and self._prev_net:
            values[(M.NODE_NETWORK_RECEIVE_BYTES, None)] = rx_total
            values[(M.NODE_NETWORK_TRANSMIT_BYTES, None)] = tx_total

        current: dict[int, tuple[str, int]] | None = None
        if stats is not None:
            current = {}
            for st in stats:
                key = container_key(st.namespace, st.pod, st.container)
                if key in current:
                    continue  # one entry per container; a duplicate is the runtime's bug
                cpu_ms = st.cpu_usage_core_ns // 1_000_000
                current[key] = (st.container_id, cpu_ms)
                values[(M.CONTAINER_MEMORY_WORKING_SET_KIB, key)] = (
                    max(st.memory_working_set_bytes, 0) // 1024
                )
                if not counting or self._prev_containers is None:
                    continue
                prev_c = self._prev_containers.get(key)
                if prev_c is None or prev_c[0] != st.container_id:
                    inc = cpu_ms  # started (or restarted) during the window
                else:
                    inc = cpu_ms - prev_c[1] if cpu_ms >= prev_c[1] else 0
                values[(M.CONTAINER_CPU_USAGE_MS, key)] = inc

        self._prev_mono = mono_s
        self._prev_cpu_ms = reading.cpu_busy_ms
        self._prev_net = dict(reading.network)
        self._prev_containers = current
        return Sample(wall_ms, window_ms, values)

    async def _container_stats(self) -> Sequence[ContainerStats] | None:
        if self._containers is None:
            return ()
        try:
            stats = await self._containers.container_stats()
        except Exception as exc:  # any runtime failure: logged, never fatal
            text = f"{type(exc).__name__}: {exc}"
            if text != self._container_error:
                log.warning(
                    "metrics: container stats unavailable (%s); sampling the node only", text
                )
            self._container_error = text
            return None
        if self._container_error is not None:
            log.info("metrics: container stats available again")
            self._container_error = None
        return stats
