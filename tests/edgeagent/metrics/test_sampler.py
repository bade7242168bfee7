"""The sampler turns cumulative readings into per-window increments, robustly."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from edgeagent.metrics import (
    ContainerStats,
    ContainerStatsSource,
    FilesystemUsage,
    HostReading,
    MetricsSettings,
    Sampler,
)
from protocol.metrics_codec import Metric, container_key

M = Metric


class ScriptedHost:
    """A node whose cumulative counters the test sets before each sample."""

    def __init__(self) -> None:
        self.cpu_ms = 10_000
        self.network: dict[str, tuple[int, int]] = {"eth0": (1000, 500)}

    def read(self, wall_s: float) -> HostReading:
        return HostReading(
            cpu_busy_ms=self.cpu_ms,
            cpu_capacity_millicores=4000,
            memory_capacity_kib=4_000_000,
            memory_available_kib=3_000_000,
            memory_working_set_kib=1_000_000,
            filesystems={"root": FilesystemUsage(100, 60, 40)},
            network=dict(self.network),
            load_centi=(12, 34, 56),
            uptime_s=int(wall_s) - 1000,
            temperatures={"cpu-thermal": 451},
        )


class ScriptedRuntime:
    """A runtime whose container stats (or failure) the test sets before each sample."""

    def __init__(self) -> None:
        self.stats: list[ContainerStats] = []
        self.error: Exception | None = None

    async def container_stats(self) -> Sequence[ContainerStats]:
        if self.error is not None:
            raise self.error
        return list(self.stats)


def stats(cid: str, cpu_ms: int, ws: int, name: str = "app") -> ContainerStats:
    return ContainerStats("default", "web-0", name, cid, cpu_ms * 1_000_000, ws)


KEY = container_key("default", "web-0", "app")


@pytest.fixture
def host() -> ScriptedHost:
    return ScriptedHost()


@pytest.fixture
def runtime() -> ScriptedRuntime:
    return ScriptedRuntime()


@pytest.fixture
def sampler(host: ScriptedHost, runtime: ScriptedRuntime) -> Sampler:
    return Sampler(MetricsSettings(), runtime, host=host)  # type: ignore[arg-type]


def test_runtime_satisfies_the_protocol(runtime: ScriptedRuntime) -> None:
    assert isinstance(runtime, ContainerStatsSource)


async def test_first_sample_has_gauges_but_no_counters(sampler: Sampler) -> None:
    sample = await sampler.sample(wall_ms=1_700_000_000_000, mono_s=50.0)
    assert sample.t_ms == 1_700_000_000_000
    assert sample.window_ms == 0
    assert sample.values[(M.NODE_MEMORY_AVAILABLE_KIB, None)] == 3_000_000
    assert sample.values[(M.NODE_FS_ROOT_USED_KIB, None)] == 40
    assert sample.values[(M.NODE_LOAD5_CENTI, None)] == 34
    assert sample.values[(M.NODE_UPTIME_SECONDS, None)] == 1_700_000_000 - 1000
    assert sample.values[(M.NODE_TEMPERATURE_DECICELSIUS, "cpu-thermal")] == 451
    assert (M.NODE_CPU_USAGE_MS, None) not in sample.values
    assert (M.NODE_MEMORY_WORKING_SET_KIB, None) not in sample.values  # derived by the hub


async def test_counters_become_increments_over_the_monotonic_window(
    sampler: Sampler, host: ScriptedHost
) -> None:
    await sampler.sample(wall_ms=1_000_000, mono_s=50.0)
    host.cpu_ms += 1234
    host.network = {"eth0": (1500, 600), "wlan0": (99_999, 99_999)}  # wlan0 appears
    # The wall clock jumped (NTP): the window still comes from the monotonic clock.
    sample = await sampler.sample(wall_ms=9_000_000, mono_s=65.0)
    assert sample.window_ms == 15_000
    assert sample.values[(M.NODE_CPU_USAGE_MS, None)] == 1234
    assert sample.values[(M.NODE_NETWORK_RECEIVE_BYTES, None)] == 500  # wlan0 counts from now
    assert sample.values[(M.NODE_NETWORK_TRANSMIT_BYTES, None)] == 100
    host.network = {"wlan0": (100_099, 100_000)}  # eth0 unplugged
    host.cpu_ms -= 50  # a CPU went offline: the sum went back
    sample = await sampler.sample(wall_ms=9_015_000, mono_s=80.0)
    assert sample.values[(M.NODE_NETWORK_RECEIVE_BYTES, None)] == 100
    assert sample.values[(M.NODE_NETWORK_TRANSMIT_BYTES, None)] == 1
    assert sample.values[(M.NODE_CPU_USAGE_MS, None)] == 0


async def test_monotonic_clock_going_back_restarts_the_window(sampler: Sampler) -> None:
    await sampler.sample(wall_ms=1_000, mono_s=50.0)
    sample = await sampler.sample(wall_ms=2_000, mono_s=40.0)
    assert sample.window_ms == 0
    assert (M.NODE_CPU_USAGE_MS, None) not in sample.values


async def test_container_increments_restarts_and_units(
    sampler: Sampler, runtime: ScriptedRuntime
) -> None:
    runtime.stats = [stats("c1", 1000, 50 * 1024 * 1024)]
    first = await sampler.sample(wall_ms=1_000, mono_s=0.0)
    assert first.values[(M.CONTAINER_MEMORY_WORKING_SET_KIB, KEY)] == 50 * 1024
    assert (M.CONTAINER_CPU_USAGE_MS, KEY) not in first.values

    runtime.stats = [stats("c1", 1300, 51 * 1024 * 1024)]
    s = await sampler.sample(wall_ms=16_000, mono_s=15.0)
    assert s.values[(M.CONTAINER_CPU_USAGE_MS, KEY)] == 300

    runtime.stats = [stats("c2", 40, 10 * 1024 * 1024)]  # restarted: a new id, counter reset
    s = await sampler.sample(wall_ms=31_000, mono_s=30.0)
    assert s.values[(M.CONTAINER_CPU_USAGE_MS, KEY)] == 40

    other = container_key("default", "web-0", "sidecar")
    runtime.stats = [stats("c2", 60, 1), stats("c3", 7, 2048, name="sidecar")]  # new container
    s = await sampler.sample(wall_ms=46_000, mono_s=45.0)
    assert s.values[(M.CONTAINER_CPU_USAGE_MS, KEY)] == 20
    assert s.values[(M.CONTAINER_CPU_USAGE_MS, other)] == 7
    assert s.values[(M.CONTAINER_MEMORY_WORKING_SET_KIB, other)] == 2

    runtime.stats = []  # everything stopped
    s = await sampler.sample(wall_ms=61_000, mono_s=60.0)
    assert not [k for k in s.values if isinstance(k[1], int)]


async def test_runtime_failure_samples_the_node_and_logs_once(
    sampler: Sampler, runtime: ScriptedRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    runtime.stats = [stats("c1", 1000, 4096)]
    await sampler.sample(wall_ms=1_000, mono_s=0.0)
    runtime.error = ConnectionRefusedError("engine down")
    with caplog.at_level(logging.WARNING, logger="edgeagent.metrics.sampler"):
        for i in range(3):
            s = await sampler.sample(wall_ms=16_000 + i * 15_000, mono_s=15.0 + i * 15)
            assert (M.NODE_CPU_USAGE_MS, None) in s.values
            assert not [k for k in s.values if isinstance(k[1], int)]
    assert len([r for r in caplog.records if "engine down" in r.getMessage()]) == 1
    runtime.error = None
    runtime.stats = [stats("c1", 9000, 4096)]
    s = await sampler.sample(wall_ms=100_000, mono_s=100.0)
    # The previous figures are unknown after the gap: no made-up increment of 8 s.
    assert (M.CONTAINER_CPU_USAGE_MS, KEY) not in s.values
    assert s.values[(M.CONTAINER_MEMORY_WORKING_SET_KIB, KEY)] == 4
    runtime.stats = [stats("c1", 9100, 4096)]
    s = await sampler.sample(wall_ms=115_000, mono_s=115.0)
    assert s.values[(M.CONTAINER_CPU_USAGE_MS, KEY)] == 100


async def test_duplicate_entries_from_the_runtime_keep_the_first(
    sampler: Sampler, runtime: ScriptedRuntime
) -> None:
    runtime.stats = [stats("c1", 10, 2048), stats("old", 99, 999_999)]
    s = await sampler.sample(wall_ms=1_000, mono_s=0.0)
    assert s.values[(M.CONTAINER_MEMORY_WORKING_SET_KIB, KEY)] == 2


async def test_node_without_runtime_has_only_node_series(host: ScriptedHost) -> None:
    sampler = Sampler(MetricsSettings(), None, host=host)  # type: ignore[arg-type]
    s = await sampler.sample(wall_ms=1_000, mono_s=0.0)
    assert all(k[1] is None or isinstance(k[1], str) for k in s.values)
