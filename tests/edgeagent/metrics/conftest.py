"""Fake sysfs trees, laid out as the kernels of a Raspberry Pi, a Jetson and an amdgpu PC."""

from __future__ import annotations

import os
import pathlib

import pytest


def write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def link(path: pathlib.Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


@pytest.fixture
def pi_sys(tmp_path: pathlib.Path) -> pathlib.Path:
    """A Raspberry Pi 4: one thermal zone, a devfreq-less SoC, no GPU figures."""
    root = tmp_path / "sys"
    write(root / "class/thermal/thermal_zone0/type", "cpu-thermal\n")
    write(root / "class/thermal/thermal_zone0/temp", "48686\n")
    (root / "class/thermal/cooling_device0").mkdir(parents=True)
    return root


@pytest.fixture
def jetson_sys(tmp_path: pathlib.Path) -> pathlib.Path:
    """A Jetson AGX Orin: six zones, the ga10b GPU behind a devfreq symlink, nvmap debugfs."""
    root = tmp_path / "sys"
    zones = [
        ("CPU-therm", "51260"),
        ("GPU-therm", "49562"),
        ("SOC0-therm", "50000"),
        ("tj-therm", "52031"),
        ("tj-therm", "51000"),  # a second zone of the same type
        ("PMIC-Die", "not-a-number"),  # a sensor that answers garbage
    ]
    for i, (kind, temp) in enumerate(zones):
        write(root / f"class/thermal/thermal_zone{i}/type", kind + "\n")
        write(root / f"class/thermal/thermal_zone{i}/temp", temp + "\n")
    write(root / "class/thermal/thermal_zone6/type", "CV0-therm\n")  # temp unreadable: no file
    gpu = root / "devices/platform/17000000.ga10b"
    write(gpu / "load", "347\n")
    write(root / "firmware/devicetree/base/gpu@17000000/name", "ga10b\x00")
    link(gpu / "of_node", "../../../firmware/devicetree/base/gpu@17000000")
    freq = gpu / "devfreq/17000000.ga10b"
    write(freq / "cur_freq", "918000000\n")
    write(freq / "max_freq", "1300500000\n")
    link(freq / "device", "../../../17000000.ga10b")
    link(
        root / "class/devfreq/17000000.ga10b",
        "../../devices/platform/17000000.ga10b/devfreq/17000000.ga10b",
    )
    # A devfreq device that is not the GPU (the memory controller) is skipped.
    emc = root / "devices/platform/bus@0/2c60000.external-memory-controller"
    write(emc / "devfreq/2c60000.emc/cur_freq", "2133000000\n")
    write(root / "firmware/devicetree/base/emc/name", "external-memory-controller\x00")
    link(emc / "of_node", "../../../../firmware/devicetree/base/emc")
    link(emc / "devfreq/2c60000.emc/device", "../..")
    link(
        root / "class/devfreq/2c60000.emc",
        "../../devices/platform/bus@0/2c60000.external-memory-controller/devfreq/2c60000.emc",
    )
    write(
        root / "kernel/debug/nvmap/iovmm/clients",
        "CLIENT                        PROCESS      PID        SIZE\n"
        "user                      python3        4242     204800K\n"
        "user                   gnome-shell       1312      26624K\n"
        "total                                              231424K\n",
    )
    return root


@pytest.fixture
def nano_sys(tmp_path: pathlib.Path) -> pathlib.Path:
    """An older Jetson (Nano, L4T 32) without the devfreq link: only devices/gpu.0/load."""
    root = tmp_path / "sys"
    write(root / "devices/gpu.0/load", "1000\n")
    return root


@pytest.fixture
def amd_sys(tmp_path: pathlib.Path) -> pathlib.Path:
    """A PC with an amdgpu card (and a connector entry that is not a card)."""
    root = tmp_path / "sys"
    device = root / "class/drm/card0/device"
    write(device / "gpu_busy_percent", "37\n")
    write(device / "mem_info_vram_used", str(512 * 1024 * 1024) + "\n")
    write(device / "mem_info_vram_total", str(8 * 1024**3) + "\n")
    (root / "class/drm/card0-DP-1").mkdir(parents=True)
    (root / "class/drm/renderD128").mkdir(parents=True)
    return root
