"""Node readings agree with what psutil reports for the same host.

The machine is shared with other busy processes, so each comparison brackets the
reading between psutil figures taken just before and just after it; where a figure is
not monotonic (memory, disk space) the bracket is widened by a stated tolerance.
"""

from __future__ import annotations

import os
import pathlib
import time

import psutil
import pytest

from edgeagent.metrics import HostReader, MetricsSettings, Sampler, SamplingError
from protocol.metrics_codec import Metric

MEMORY_TOLERANCE_KIB = 64 * 1024  # other processes allocate between the two psutil reads
DISK_TOLERANCE_KIB = 64 * 1024  # other processes write between the two reads


def busy_ms() -> float:
    t = psutil.cpu_times()
    return (t.user + t.nice + t.system + t.irq + t.softirq) * 1000


@pytest.fixture
def settings(tmp_path: pathlib.Path) -> MetricsSettings:
    return MetricsSettings(state_dir=str(tmp_path), sys_root=str(tmp_path / "no-sys"))


def test_cpu_memory_load_uptime_match_psutil(settings: MetricsSettings) -> None:
    reader = HostReader(settings)
    cpu_before, mem_before, load_before = busy_ms(), psutil.virtual_memory(), os.getloadavg()
    now = time.time()
    reading = reader.read(now)
    cpu_after, mem_after, load_after = busy_ms(), psutil.virtual_memory(), os.getloadavg()

    assert cpu_before - 1 <= reading.cpu_busy_ms <= cpu_after + 1
    assert reading.cpu_capacity_millicores == psutil.cpu_count() * 1000
    assert reading.memory_capacity_kib == mem_before.total // 1024
    low = min(mem_before.available, mem_after.available) // 1024 - MEMORY_TOLERANCE_KIB
    high = max(mem_before.available, mem_after.available) // 1024 + MEMORY_TOLERANCE_KIB
    assert low <= reading.memory_available_kib <= high
    assert reading.memory_working_set_kib == (
        reading.memory_capacity_kib - reading.memory_available_kib
    )
    for i in range(3):
        lo = min(load_before[i], load_after[i]) * 100
        hi = max(load_before[i], load_after[i]) * 100
        assert lo - 1 <= reading.load_centi[i] <= hi + 1
    assert abs(reading.uptime_s - (now - psutil.boot_time())) <= 1


def test_filesystems_match_psutil_disk_usage(settings: MetricsSettings) -> None:
    reading = HostReader(settings).read(time.time())
    for name, path in (("root", "/"), ("state", settings.state_dir)):
        fs = reading.filesystems[name]
        usage = psutil.disk_usage(path)
        assert fs.capacity_kib == usage.total // 1024
        assert abs(fs.available_kib - usage.free // 1024) <= DISK_TOLERANCE_KIB
        assert abs(fs.used_kib - usage.used // 1024) <= DISK_TOLERANCE_KIB


def test_network_bytes_match_proc_net_dev_without_loopback(settings: MetricsSettings) -> None:
    before = psutil.net_io_counters(pernic=True)
    reading = HostReader(settings).read(time.time())
    after = psutil.net_io_counters(pernic=True)
    assert "lo" not in reading.network
    expected = {n for n in before if not n.startswith(settings.net_exclude)}
    assert set(reading.network) == expected
    for name, (rx, tx) in reading.network.items():
        assert before[name].bytes_recv <= rx <= after[name].bytes_recv
        assert before[name].bytes_sent <= tx <= after[name].bytes_sent


async def test_cpu_increment_over_a_window_matches_psutil(settings: MetricsSettings) -> None:
    """Cores used = increment / window: bracketed by psutil's busy time around both samples."""
    sampler = Sampler(settings)
    b0 = busy_ms()
    await sampler.sample(wall_ms=int(time.time() * 1000), mono_s=time.monotonic())
    a1 = busy_ms()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # burn CPU so that the increment is not zero
        sum(range(1000))
    b2 = busy_ms()
    sample = await sampler.sample(wall_ms=int(time.time() * 1000), mono_s=time.monotonic())
    a2 = busy_ms()
    increment = sample.values[(Metric.NODE_CPU_USAGE_MS, None)]
    assert b2 - a1 - 2 <= increment <= a2 - b0 + 2
    assert increment >= 250  # the burn loop alone used ~300 ms
    assert 300 <= sample.window_ms < 10_000


def test_missing_state_dir_is_skipped_but_missing_root_fails(tmp_path: pathlib.Path) -> None:
    settings = MetricsSettings(state_dir=str(tmp_path / "absent"), sys_root=str(tmp_path))
    reading = HostReader(settings).read(time.time())
    assert set(reading.filesystems) == {"root"}
    broken = MetricsSettings(root_path=str(tmp_path / "absent"), sys_root=str(tmp_path))
    with pytest.raises(SamplingError, match="filesystem"):
        HostReader(broken).read(time.time())
