"""Node-level readings: CPU, memory, filesystems, network, load, uptime, temperature, GPU.

``psutil`` reads ``/proc`` and is imported on the first reading, not when the agent starts
(it costs about 2 MB of RSS; the agent's whole budget is 45 MB). Thermal zones and GPUs are
read from sysfs under ``MetricsSettings.sys_root`` (see :mod:`edgeagent.metrics.sysfs`).

Definitions (what each figure means, and where it comes from):

- CPU busy time: ``user + nice + system + irq + softirq`` of ``/proc/stat`` summed over
  all CPUs (``psutil.cpu_times()``); ``idle`` and ``iowait`` are idle, ``steal`` is time the
  hypervisor gave to someone else, ``guest`` is already inside ``user``.
- Memory working set: ``MemTotal - MemAvailable``, what kubelet's eviction manager calls
  the working set when it derives ``memory.available = capacity - workingSet``.
- Filesystems: ``statvfs`` of ``/`` and of the state directory; *available* is what an
  unprivileged process may still write (root-reserved blocks excluded), *used* is
  ``size - free``, as ``df`` shows.
- Network: ``/proc/net/dev`` byte counters of every interface except loopback and virtual
  container links (``MetricsSettings.net_exclude``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgeagent.metrics.errors import SamplingError
from edgeagent.metrics.sysfs import GpuReading, GpuSource, find_gpus, read_thermal_zones

if TYPE_CHECKING:
    from edgeagent.metrics.settings import MetricsSettings

__all__ = ["FilesystemUsage", "HostReader", "HostReading"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FilesystemUsage:
    """One filesystem's space (KiB)."""

    capacity_kib: int
    available_kib: int
    used_kib: int


@dataclass(frozen=True, slots=True)
class HostReading:
    """The node's state at one instant; counters are cumulative here.

    Attributes:
        cpu_busy_ms: CPU time spent busy since boot, all CPUs (ms).
        cpu_capacity_millicores: online CPUs x 1000.
        memory_capacity_kib: ``MemTotal`` (KiB).
        memory_available_kib: ``MemAvailable`` (KiB).
        memory_working_set_kib: capacity - available (KiB).
        filesystems: ``"root"`` and (if the directory exists) ``"state"`` → usage.
        network: interface → ``(received bytes, transmitted bytes)`` since it appeared.
        load_centi: 1, 5 and 15-minute load averages x 100.
        uptime_s: seconds since boot.
        temperatures: thermal zone type → tenths of a degree Celsius.
        gpus: GPU name → reading.
    """

    cpu_busy_ms: int
    cpu_capacity_millicores: int
    memory_capacity_kib: int
    memory_available_kib: int
    memory_working_set_kib: int
    filesystems: dict[str, FilesystemUsage]
    network: dict[str, tuple[int, int]]
    load_centi: tuple[int, int, int]
    uptime_s: int
    temperatures: dict[str, int] = field(default_factory=dict)
    gpus: dict[str, GpuReading] = field(default_factory=dict)


class HostReader:
    """Reads the node's figures; one instance per agent (it remembers the GPUs it found).

    Args:
        settings: the metrics settings (paths, interface exclusions).
    """

    def __init__(self, settings: MetricsSettings) -> None:
        self._settings = settings
        self._psutil: Any = None
        self._gpus: list[GpuSource] | None = None
        self._state_missing_logged = False

    def _ps(self) -> Any:
        if self._psutil is None:
            import psutil  # lazy: see the module docstring

            self._psutil = psutil
        return self._psutil

    def read(self, wall_s: float) -> HostReading:
        """Read every figure once.

        Args:
            wall_s: the wall-clock time of the reading (seconds since the epoch), used for
                the uptime.

        Returns:
            The reading.

        Raises:
            SamplingError: ``/proc`` or the root filesystem could not be read.
        """
        ps = self._ps()
        settings = self._settings
        try:
            times = ps.cpu_times()
            busy = times.user + times.nice + times.system
            busy += getattr(times, "irq", 0.0) + getattr(times, "softirq", 0.0)
            mem = ps.virtual_memory()
            load = os.getloadavg()
            boot = ps.boot_time()
            counters = ps.net_io_counters(pernic=True)
            cpus = ps.cpu_count() or 1
        except (OSError, ps.Error) as exc:
            raise SamplingError("/proc", str(exc)) from exc
        filesystems = {"root": self._fs(settings.root_path, required=True)}
        state = self._fs(settings.state_dir, required=False)
        if state is not None:
            filesystems["state"] = state
        network = {
            name: (c.bytes_recv, c.bytes_sent)
            for name, c in counters.items()
            if not name.startswith(settings.net_exclude)
        }
        if self._gpus is None:
            self._gpus = find_gpus(settings.sys_root)
        total_kib = mem.total // 1024
        available_kib = mem.available // 1024
        return HostReading(
            cpu_busy_ms=int(busy * 1000),
            cpu_capacity_millicores=cpus * 1000,
            memory_capacity_kib=total_kib,
            memory_available_kib=available_kib,
            memory_working_set_kib=max(total_kib - available_kib, 0),
            filesystems=filesystems,
            network=network,
            load_centi=(round(load[0] * 100), round(load[1] * 100), round(load[2] * 100)),
            uptime_s=max(int(wall_s - boot), 0),
            temperatures=read_thermal_zones(settings.sys_root),
            gpus={gpu.name: gpu.read() for gpu in self._gpus},
        )

    def _fs(self, path: str, *, required: bool) -> FilesystemUsage | None:
        try:
            st = os.statvfs(path)
        except OSError as exc:
            if required:
                raise SamplingError(f"filesystem {path}", str(exc)) from exc
            if not self._state_missing_logged:
                log.warning(
                    "metrics: cannot stat %s (%s); its filesystem is not sampled", path, exc
                )
                self._state_missing_logged = True
            return None
        size = st.f_frsize
        return FilesystemUsage(
            capacity_kib=st.f_blocks * size // 1024,
            available_kib=st.f_bavail * size // 1024,
            used_kib=(st.f_blocks - st.f_bfree) * size // 1024,
        )
