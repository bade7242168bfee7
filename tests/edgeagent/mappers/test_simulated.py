"""The simulated thermostat follows the desired setpoint and reports it."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys

import pytest

from edgeagent.mappers import DeviceClient, serve_devices
from edgeagent.mappers.simulated import Thermostat, serve_thermostat

from ..devices.helpers import THERMOSTAT_MODEL, desired, device, new_twins, running_api, wait_for

REPO = pathlib.Path(__file__).resolve().parents[3]
NOW = 1_700_000_000.0


def test_room_moves_toward_the_setpoint_at_its_rate() -> None:
    room = Thermostat(temperature=20.0, rate=0.5)
    assert room.step(10) == 20.0  # no setpoint: unchanged
    room.setpoint = 22.0
    assert room.step(2) == 21.0
    assert room.step(10) == 22.0  # never overshoots
    room.setpoint = 18.0
    assert room.step(1) == pytest.approx(21.5)


async def test_reported_temperature_follows_the_desired_setpoint() -> None:
    twins = new_twins()
    twins.upsert_model(THERMOSTAT_MODEL)
    twins.upsert_device(device(config={"initial": 18, "rate": 100}))
    twins.apply_desired(desired("u-1", 1, setpoint=21.0), NOW)

    def reported(prop: str) -> float | None:
        report = twins.reported("default", "thermo-1").get(prop)
        return None if report is None else float(report.value)

    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        stop = asyncio.Event()

        async def handler(c: DeviceClient, info) -> None:  # type: ignore[no-untyped-def]
            await serve_thermostat(c, info, tick=0.02)

        mapper = asyncio.create_task(serve_devices(client, "simulated", handler, stop=stop))
        try:
            await wait_for(twins, lambda: reported("temperature") == 21.0)
            assert reported("setpoint") == 21.0
            # the cloud changes its mind: generation 2
            twins.apply_desired(desired("u-1", 2, setpoint=30.5), NOW)
            await wait_for(twins, lambda: reported("temperature") == 30.5)
            assert reported("setpoint") == 30.5
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.shield(mapper), 10)  # fails if stop is ignored


def test_cli_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "edgeagent.mappers.simulated", "--help"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 0 and "--tick" in result.stdout
