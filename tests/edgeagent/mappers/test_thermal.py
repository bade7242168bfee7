"""The thermal-zone mapper on a fake sysfs tree, against a real device API."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys

import pytest

from edgeagent.mappers import DeviceClient, serve_devices
from edgeagent.mappers.thermal import (
    ZoneError,
    find_zone,
    list_zones,
    read_celsius,
    serve_zone,
)

from ..devices.helpers import device, new_twins, running_api, wait_for

REPO = pathlib.Path(__file__).resolve().parents[3]

THERMAL_MODEL = {
    "apiVersion": "devices.kubeedge.io/v1beta1",
    "kind": "DeviceModel",
    "metadata": {"name": "linux-thermal-zone", "namespace": "default"},
    "spec": {
        "protocol": "linux-thermal",
        "properties": [
            {
                "name": "temperature",
                "type": "DOUBLE",
                "accessMode": "ReadOnly",
                "minimum": "-60",
                "maximum": "200",
            },
            {"name": "zone-type", "type": "STRING", "accessMode": "ReadOnly"},
        ],
    },
}


def make_sysfs(root: pathlib.Path, zones: dict[str, tuple[str, str]]) -> pathlib.Path:
    """A fake ``/sys``: zones maps directory name -> (type, temp file content)."""
    base = root / "class" / "thermal"
    base.mkdir(parents=True)
    (base / "cooling_device0").mkdir()  # not a zone
    for name, (ztype, temp) in zones.items():
        (base / name).mkdir()
        (base / name / "type").write_text(ztype + "\n")
        (base / name / "temp").write_text(temp + "\n")
    return root


def set_temp(root: pathlib.Path, zone: str, text: str) -> None:
    (root / "class" / "thermal" / zone / "temp").write_text(text + "\n")


def test_zones_are_listed_found_and_read(tmp_path: pathlib.Path) -> None:
    root = make_sysfs(
        tmp_path,
        {
            "thermal_zone0": ("cpu-thermal", "48312"),
            "thermal_zone10": ("GPU-therm", "39000"),
            "thermal_zone2": ("soc", "-1500"),
        },
    )
    zones = list_zones(str(root))
    assert [z.name for z in zones] == ["thermal_zone0", "thermal_zone2", "thermal_zone10"]
    assert read_celsius(find_zone(str(root), {})) == 48.312
    assert find_zone(str(root), {"zoneType": "GPU-therm"}).name == "thermal_zone10"
    assert read_celsius(find_zone(str(root), {"zone": "thermal_zone2"})) == -1.5
    with pytest.raises(ZoneError, match="no thermal zone of type 'nope'"):
        find_zone(str(root), {"zoneType": "nope"})
    with pytest.raises(ZoneError, match="thermal_zone7"):
        find_zone(str(root), {"zone": "thermal_zone7"})
    set_temp(root, "thermal_zone0", "garbage")
    with pytest.raises(ZoneError, match="not an integer"):
        read_celsius(zones[0])
    (root / "class/thermal/thermal_zone2/temp").unlink()
    with pytest.raises(ZoneError, match="cannot read"):
        read_celsius(zones[1])
    assert list_zones(str(tmp_path / "missing")) == []


async def test_mapper_reports_zone_temperatures_to_the_agent(tmp_path: pathlib.Path) -> None:
    root = make_sysfs(
        tmp_path, {"thermal_zone0": ("cpu-thermal", "45000"), "thermal_zone1": ("gpu", "51500")}
    )
    twins = new_twins()
    twins.upsert_model(THERMAL_MODEL)
    twins.upsert_device(
        device(
            "cpu",
            "u-cpu",
            model="linux-thermal-zone",
            protocol="linux-thermal",
            config={"zoneType": "cpu-thermal"},
            properties=[{"name": "temperature"}],
        )
    )
    twins.upsert_device(
        device(
            "gpu",
            "u-gpu",
            model="linux-thermal-zone",
            protocol="linux-thermal",
            config={"zone": "thermal_zone1"},
            properties=[{"name": "temperature", "reportCycle": 50_000_000}],
        )
    )
    twins.upsert_device(device("other", "u-x", protocol="simulated"))  # not ours

    def temp(name: str) -> float | None:
        report = twins.reported("default", name).get("temperature")
        return None if report is None else float(report.value)

    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        stop = asyncio.Event()

        async def handler(c: DeviceClient, info) -> None:  # type: ignore[no-untyped-def]
            await serve_zone(c, info, sysfs_root=str(root), interval=0.05, history=True)

        mapper = asyncio.create_task(serve_devices(client, "linux-thermal", handler, stop=stop))
        try:
            await wait_for(twins, lambda: temp("cpu") == 45.0 and temp("gpu") == 51.5)
            assert twins.reported("default", "cpu")["zone-type"].value == "cpu-thermal"
            assert twins.reported("default", "other") == {}
            set_temp(root, "thermal_zone0", "47250")
            await wait_for(twins, lambda: temp("cpu") == 47.25)
            # history was asked for: readings are kept for delivery after reconnect
            assert {r.name for r in twins.pending_history()} == {"cpu", "gpu"}
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.shield(mapper), 10)  # fails if stop is ignored


def test_cli_help_and_list_zones(tmp_path: pathlib.Path) -> None:
    root = make_sysfs(tmp_path, {"thermal_zone0": ("cpu-thermal", "42000")})
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    helped = subprocess.run(
        [sys.executable, "-m", "edgeagent.mappers.thermal", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert helped.returncode == 0 and "--sysfs-root" in helped.stdout
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgeagent.mappers.thermal",
            "--sysfs-root",
            str(root),
            "--list-zones",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "thermal_zone0\tcpu-thermal\t42.0 °C"
