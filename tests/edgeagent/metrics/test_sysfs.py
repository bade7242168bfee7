"""Thermal zones and GPUs from fake sysfs trees; absent sources are skipped cleanly."""

from __future__ import annotations

import pathlib

import pytest

from edgeagent.metrics import HostReader, MetricsSettings, Sampler
from edgeagent.metrics.sysfs import GpuReading, find_gpus, read_thermal_zones
from protocol.metrics_codec import Metric


def test_raspberry_pi_zone_in_tenths_of_a_degree(pi_sys: pathlib.Path) -> None:
    assert read_thermal_zones(str(pi_sys)) == {"cpu-thermal": 487}
    assert find_gpus(str(pi_sys)) == []


def test_jetson_zones_skip_bad_sensors_and_name_duplicates(jetson_sys: pathlib.Path) -> None:
    assert read_thermal_zones(str(jetson_sys)) == {
        "CPU-therm": 513,
        "GPU-therm": 496,
        "SOC0-therm": 500,
        "tj-therm": 520,
        "tj-therm-4": 510,
    }


def test_jetson_gpu_found_through_devfreq_and_read(jetson_sys: pathlib.Path) -> None:
    gpus = find_gpus(str(jetson_sys))
    assert [g.name for g in gpus] == ["ga10b"]
    assert gpus[0].read() == GpuReading(
        utilization_permille=347,
        memory_used_kib=231424,
        memory_capacity_kib=None,  # unified memory: no separate size
        frequency_mhz=918,
    )


def test_jetson_without_debugfs_has_no_gpu_memory(jetson_sys: pathlib.Path) -> None:
    (jetson_sys / "kernel/debug/nvmap/iovmm/clients").unlink()
    (gpu,) = find_gpus(str(jetson_sys))
    reading = gpu.read()
    assert reading.memory_used_kib is None
    assert reading.utilization_permille == 347


def test_jetson_load_file_disappearing_reads_as_none(jetson_sys: pathlib.Path) -> None:
    (gpu,) = find_gpus(str(jetson_sys))
    (jetson_sys / "devices/platform/17000000.ga10b/load").unlink()
    assert gpu.read().utilization_permille is None


def test_older_jetson_legacy_load_path(nano_sys: pathlib.Path) -> None:
    (gpu,) = find_gpus(str(nano_sys))
    assert gpu.name == "gpu.0"
    assert gpu.read() == GpuReading(1000, None, None, None)


def test_amdgpu_card(amd_sys: pathlib.Path) -> None:
    (gpu,) = find_gpus(str(amd_sys))
    assert gpu.name == "card0"
    assert gpu.read() == GpuReading(370, 512 * 1024, 8 * 1024 * 1024, None)


def test_no_sysfs_at_all(tmp_path: pathlib.Path) -> None:
    missing = str(tmp_path / "nothing")
    assert read_thermal_zones(missing) == {}
    assert find_gpus(missing) == []


@pytest.mark.parametrize("zone_dir", ["thermal_zoneX", "thermal_zone"])
def test_odd_names_in_the_thermal_class_are_ignored(pi_sys: pathlib.Path, zone_dir: str) -> None:
    (pi_sys / "class/thermal" / zone_dir).mkdir()
    assert read_thermal_zones(str(pi_sys)) == {"cpu-thermal": 487}


async def test_sampler_reports_zones_and_gpu_of_a_jetson(
    jetson_sys: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    settings = MetricsSettings(sys_root=str(jetson_sys), state_dir=str(tmp_path))
    sampler = Sampler(settings, host=HostReader(settings))
    sample = await sampler.sample(wall_ms=1_700_000_000_000, mono_s=100.0)
    values = sample.values
    assert values[(Metric.NODE_TEMPERATURE_DECICELSIUS, "GPU-therm")] == 496
    assert values[(Metric.NODE_GPU_UTILIZATION_PERMILLE, "ga10b")] == 347
    assert values[(Metric.NODE_GPU_FREQUENCY_MHZ, "ga10b")] == 918
    assert values[(Metric.NODE_GPU_MEMORY_USED_KIB, "ga10b")] == 231424
    assert (Metric.NODE_GPU_MEMORY_CAPACITY_KIB, "ga10b") not in values


async def test_sampler_on_a_machine_without_sensors(tmp_path: pathlib.Path) -> None:
    settings = MetricsSettings(sys_root=str(tmp_path / "empty"), state_dir=str(tmp_path))
    sample = await Sampler(settings).sample(wall_ms=1_700_000_000_000, mono_s=1.0)
    metrics = {key[0] for key in sample.values}
    assert Metric.NODE_TEMPERATURE_DECICELSIUS not in metrics
    assert Metric.NODE_GPU_UTILIZATION_PERMILLE not in metrics
    assert Metric.NODE_MEMORY_AVAILABLE_KIB in metrics
