"""Mapper: a simulated thermostat, for demos and tests.

Serves every Device whose ``spec.protocol.protocolName`` is ``simulated``. Its model
(deploy/examples/devices/thermostat.yaml) has ``setpoint`` (DOUBLE, ReadWrite: the cloud
sets it) and ``temperature`` (DOUBLE, ReadOnly). Every tick the room temperature moves
toward the desired setpoint by at most ``rate * tick`` degrees, and the mapper reports
``temperature`` and the ``setpoint`` it is applying. ``configData`` may set ``initial``
(°C, default 20), ``rate`` (°C per second, default 0.5) and ``tick`` (seconds, default 1).

    python -m edgeagent.mappers.simulated --socket /var/lib/edgeagent/devices.sock
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from edgeagent.mappers.runner import run_main, serve_devices
from edgeagent.mappers.sdk import (
    DEFAULT_SOCKET,
    APIUnavailable,
    DeviceAPIError,
    DeviceClient,
    DeviceInfo,
)

log = logging.getLogger("edgeagent.mappers.simulated")

PROTOCOL = "simulated"


@dataclass(slots=True)
class Thermostat:
    """The simulated room: pure state, advanced by ``step``.

    Attributes:
        temperature: room temperature, °C.
        rate: how fast it approaches the setpoint, °C per second.
        setpoint: the target, °C; ``None`` leaves the room as it is.
    """

    temperature: float
    rate: float
    setpoint: float | None = None

    def step(self, seconds: float) -> float:
        """Advance the room by ``seconds``; returns the new temperature."""
        if self.setpoint is not None:
            gap = self.setpoint - self.temperature
            limit = self.rate * seconds
            self.temperature += max(-limit, min(limit, gap))
        return self.temperature


def _number(config: dict[str, object], key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return float(str(value))
        except ValueError:
            log.warning("configData.%s=%r is not a number; using %s", key, value, default)
            return default
    return float(value)


async def serve_thermostat(client: DeviceClient, device: DeviceInfo, *, tick: float | None) -> None:
    """Simulate one thermostat until cancelled: follow desired setpoint, report each tick."""
    config = dict(device.config_data)
    room = Thermostat(_number(config, "initial", 20.0), _number(config, "rate", 0.5))
    period = tick if tick is not None else _number(config, "tick", 1.0)

    async def follow_desired() -> None:
        while True:
            try:
                async for desired in client.watch_desired(device.namespace, device.name):
                    setpoint = desired.properties.get("setpoint")
                    if isinstance(setpoint, (int, float)) and not isinstance(setpoint, bool):
                        room.setpoint = float(setpoint)
                        log.info("%s: setpoint %.2f (v%d)", device.name, setpoint, desired.version)
            except (APIUnavailable, DeviceAPIError) as exc:
                log.warning("%s: cannot watch desired state: %s", device.name, exc)
                await asyncio.sleep(period)

    watcher = asyncio.create_task(follow_desired(), name=f"desired:{device.name}")
    try:
        while True:
            values: dict[str, object] = {"temperature": round(room.step(period), 3)}
            if room.setpoint is not None:
                values["setpoint"] = room.setpoint
            try:
                await client.report(device.namespace, device.name, values)
            except (APIUnavailable, DeviceAPIError) as exc:
                log.warning("%s: report failed: %s", device.name, exc)
            await asyncio.sleep(period)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m edgeagent.mappers.simulated",
        description="Simulated thermostat devices for EdgeFleet demos: the room temperature "
        "follows the setpoint desired in the cloud.",
    )
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKET,
        help="the agent's device API socket (default: %(default)s)",
    )
    parser.add_argument(
        "--protocol", default=PROTOCOL, help="protocolName to serve (default: %(default)s)"
    )
    parser.add_argument(
        "--tick", type=float, default=None, help="seconds per step (default: configData.tick or 1)"
    )
    parser.add_argument(
        "--resync", type=float, default=30.0, help="seconds between device list refreshes"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tick is not None and args.tick <= 0:
        print("--tick must be positive", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    client = DeviceClient(args.socket)

    async def handler(c: DeviceClient, device: DeviceInfo) -> None:
        await serve_thermostat(c, device, tick=args.tick)

    async def run(stop: asyncio.Event) -> None:
        await serve_devices(client, args.protocol, handler, stop=stop, resync_interval=args.resync)

    return run_main(run)


if __name__ == "__main__":
    sys.exit(main())
