"""Thermal zones and GPUs read from sysfs, under an injectable root.

Every reader here is optional: a file that is missing or unreadable (no permission, a zone
whose sensor returns ``EINVAL``/``ENODATA``) is skipped, so a Raspberry Pi, a Jetson and a
PC in a cabinet all sample what they have and nothing fails where a source is absent.

GPU sources, found once at start (:func:`find_gpus`):

- **NVIDIA Jetson** (integrated GPU): a devfreq device under ``class/devfreq/*`` whose
  ``device/of_node/name`` is a Tegra GPU (``gm20b`` Nano/TX1, ``gp10b`` TX2, ``gv11b``
  Xavier, ``ga10b`` Orin, ``gb10b``, or ``gpu``); utilisation is ``device/load``
  (per mille, 0-1000, the figure tegrastats shows as GR3D), the clock is ``cur_freq``
  (Hz). Older kernels without the devfreq link expose ``devices/gpu.0/load`` or
  ``devices/platform/gpu.0/load``. GPU memory is the CPU's (unified); what the GPU holds
  is the ``total`` line of debugfs ``kernel/debug/nvmap/iovmm/clients`` (readable by root
  only, skipped otherwise).
- **AMD** (amdgpu): ``class/drm/card*/device/gpu_busy_percent`` (percent),
  ``mem_info_vram_used`` and ``mem_info_vram_total`` (bytes); the clock is not read.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

__all__ = ["GpuReading", "GpuSource", "find_gpus", "read_thermal_zones"]

log = logging.getLogger(__name__)

JETSON_GPU_NAMES = frozenset({"gm20b", "gp10b", "gv11b", "ga10b", "gb10b", "gpu"})
"""``of_node`` names of Tegra integrated GPUs (jetson-stats knows the same set)."""


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def read_thermal_zones(sys_root: str = "/sys") -> dict[str, int]:
    """Read every thermal zone's temperature.

    Args:
        sys_root: where sysfs is mounted.

    Returns:
        Zone type (``"cpu-thermal"``, ``"GPU-therm"``) → temperature in tenths of a degree
        Celsius (sysfs gives millidegrees; rounded). Zones with the same type get
        ``"-<zone number>"`` appended from the second one on. Empty where there is no
        thermal class (most VMs and containers).
    """
    base = os.path.join(sys_root, "class", "thermal")
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    zones = sorted(
        (n for n in names if n.startswith("thermal_zone") and n[12:].isdigit()),
        key=lambda n: int(n[12:]),
    )
    result: dict[str, int] = {}
    for name in zones:
        millideg = _read_int(os.path.join(base, name, "temp"))
        if millideg is None:
            continue
        kind = _read_text(os.path.join(base, name, "type")) or name
        if kind in result:
            kind = f"{kind}-{name[12:]}"
        result[kind] = round(millideg / 100)
    return result


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's state at a sample.

    Attributes:
        utilization_permille: busy fraction x 1000, or ``None`` if unreadable.
        memory_used_kib: GPU memory in use (KiB), or ``None``.
        memory_capacity_kib: GPU memory size (KiB), or ``None`` (unified memory).
        frequency_mhz: current clock (MHz), or ``None``.
    """

    utilization_permille: int | None
    memory_used_kib: int | None
    memory_capacity_kib: int | None
    frequency_mhz: int | None


@dataclass(frozen=True, slots=True)
class GpuSource:
    """Where one GPU's figures are read from; made by :func:`find_gpus`.

    Attributes:
        name: the series label (``"ga10b"``, ``"card0"``).
        load_path: utilisation file.
        load_scale: multiply its value by this to get per mille (1 for Jetson's per-mille
            ``load``, 10 for amdgpu's percent).
        freq_path: clock file in Hz, or ``None``.
        mem_used_path: memory-in-use file, or ``None``.
        mem_used_is_nvmap: that file is nvmap's ``iovmm/clients`` listing (its ``total``
            line, in KiB) rather than a plain number of bytes (amdgpu).
        mem_total_path: memory-size file in bytes, or ``None``.
    """

    name: str
    load_path: str
    load_scale: int
    freq_path: str | None = None
    mem_used_path: str | None = None
    mem_used_is_nvmap: bool = False
    mem_total_path: str | None = None

    def read(self) -> GpuReading:
        """Read the GPU's current figures; unreadable ones are ``None``."""
        load = _read_int(self.load_path)
        freq = _read_int(self.freq_path) if self.freq_path else None
        used = None
        if self.mem_used_path is not None:
            if self.mem_used_is_nvmap:
                used = _read_nvmap_total_kib(self.mem_used_path)
            else:
                used_bytes = _read_int(self.mem_used_path)
                used = None if used_bytes is None else used_bytes // 1024
        total = _read_int(self.mem_total_path) if self.mem_total_path else None
        return GpuReading(
            utilization_permille=None if load is None else load * self.load_scale,
            memory_used_kib=used,
            memory_capacity_kib=None if total is None else total // 1024,
            frequency_mhz=None if freq is None else round(freq / 1_000_000),
        )


def _read_nvmap_total_kib(path: str) -> int | None:
    """Parse the ``total ... <N>K`` line of nvmap's ``iovmm/clients`` listing."""
    text = _read_text(path)
    if text is None:
        return None
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "total":
            size = fields[-1]
            try:
                return int(size[:-1]) if size[-1:] in ("K", "k") else int(size) // 1024
            except ValueError:
                return None
    return None


def find_gpus(sys_root: str = "/sys") -> list[GpuSource]:
    """Find the GPUs whose figures sysfs exposes (Jetson iGPU, amdgpu).

    Args:
        sys_root: where sysfs is mounted.

    Returns:
        One source per GPU found, possibly none; call it once at start.
    """
    found: list[GpuSource] = []
    nvmap = os.path.join(sys_root, "kernel", "debug", "nvmap", "iovmm", "clients")
    nvmap_path = nvmap if _read_text(nvmap) is not None else None
    devfreq = os.path.join(sys_root, "class", "devfreq")
    try:
        entries = sorted(os.listdir(devfreq))
    except OSError:
        entries = []
    for entry in entries:
        path = os.path.join(devfreq, entry)
        of_name = _read_text(os.path.join(path, "device", "of_node", "name"))
        if of_name is None:
            continue
        of_name = of_name.rstrip("\x00")
        if of_name not in JETSON_GPU_NAMES:
            continue
        load = os.path.join(path, "device", "load")
        if not os.path.exists(load):
            continue
        found.append(
            GpuSource(
                name=of_name,
                load_path=load,
                load_scale=1,
                freq_path=os.path.join(path, "cur_freq"),
                mem_used_path=nvmap_path,
                mem_used_is_nvmap=True,
            )
        )
    if not found:
        for legacy in ("devices/gpu.0/load", "devices/platform/gpu.0/load"):
            load = os.path.join(sys_root, legacy)
            if os.path.exists(load):
                found.append(
                    GpuSource(
                        name="gpu.0",
                        load_path=load,
                        load_scale=1,
                        mem_used_path=nvmap_path,
                        mem_used_is_nvmap=True,
                    )
                )
                break
    drm = os.path.join(sys_root, "class", "drm")
    try:
        cards = sorted(n for n in os.listdir(drm) if n.startswith("card") and n[4:].isdigit())
    except OSError:
        cards = []
    for card in cards:
        device = os.path.join(drm, card, "device")
        busy = os.path.join(device, "gpu_busy_percent")
        if not os.path.exists(busy):
            continue
        used = os.path.join(device, "mem_info_vram_used")
        total = os.path.join(device, "mem_info_vram_total")
        found.append(
            GpuSource(
                name=card,
                load_path=busy,
                load_scale=10,
                mem_used_path=used if os.path.exists(used) else None,
                mem_total_path=total if os.path.exists(total) else None,
            )
        )
    for gpu in found:
        log.info("metrics: GPU %s found (utilisation from %s)", gpu.name, gpu.load_path)
    return found
