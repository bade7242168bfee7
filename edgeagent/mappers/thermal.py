"""Mapper: Linux thermal zones (``/sys/class/thermal``) as temperature devices.

Serves every Device on the node whose ``spec.protocol.protocolName`` is ``linux-thermal``
(``--protocol``). ``spec.protocol.configData`` picks the zone: ``zone: thermal_zone1`` (the
directory name) or ``zoneType: cpu-thermal`` (the zone's ``type`` file, as on Raspberry Pi
OS; Jetson boards name zones ``CPU-therm``, ``GPU-therm``…); with neither,
``thermal_zone0``. It reports ``temperature`` (°C; the kernel gives millidegrees) and,
when the model has it, ``zone-type``. The report period is the ``temperature``
property's ``reportCycle`` (nanoseconds, as KubeEdge mappers read it), else ``--interval``.

    python -m edgeagent.mappers.thermal --socket /var/lib/edgeagent/devices.sock
    python -m edgeagent.mappers.thermal --list-zones
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
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

log = logging.getLogger("edgeagent.mappers.thermal")

PROTOCOL = "linux-thermal"


class ZoneError(Exception):
    """A thermal zone cannot be found or read."""


@dataclass(frozen=True, slots=True)
class Zone:
    """One thermal zone.

    Attributes:
        name: directory name, e.g. ``thermal_zone0``.
        type: content of its ``type`` file, e.g. ``cpu-thermal``; ``""`` if unreadable.
        path: the zone directory.
    """

    name: str
    type: str
    path: str


def list_zones(sysfs_root: str = "/sys") -> list[Zone]:
    """The thermal zones under ``<sysfs_root>/class/thermal``, sorted by number."""
    base = os.path.join(sysfs_root, "class", "thermal")
    try:
        names = [n for n in os.listdir(base) if n.startswith("thermal_zone")]
    except OSError:
        return []
    names.sort(key=lambda n: int(n.removeprefix("thermal_zone") or -1))
    zones = []
    for name in names:
        path = os.path.join(base, name)
        try:
            with open(os.path.join(path, "type")) as f:
                ztype = f.read().strip()
        except OSError:
            ztype = ""
        zones.append(Zone(name, ztype, path))
    return zones


def find_zone(sysfs_root: str, config: dict[str, object] | None) -> Zone:
    """The zone a Device's ``configData`` selects (``zone`` or ``zoneType``).

    Raises:
        ZoneError: no such zone.
    """
    config = config or {}
    zones = list_zones(sysfs_root)
    if config.get("zoneType"):
        wanted = str(config["zoneType"])
        for zone in zones:
            if zone.type == wanted:
                return zone
        raise ZoneError(f"no thermal zone of type {wanted!r} under {sysfs_root}")
    wanted = str(config.get("zone") or "thermal_zone0")
    for zone in zones:
        if zone.name == wanted:
            return zone
    raise ZoneError(f"no thermal zone {wanted!r} under {sysfs_root}")


def read_celsius(zone: Zone) -> float:
    """The zone's temperature in °C (``temp`` holds millidegrees).

    Raises:
        ZoneError: unreadable (some zones answer EINVAL/ENODATA while powered down) or
            not an integer.
    """
    try:
        with open(os.path.join(zone.path, "temp")) as f:
            text = f.read().strip()
    except OSError as exc:
        raise ZoneError(f"{zone.name}: cannot read temp: {exc.strerror or exc}") from exc
    try:
        return int(text) / 1000.0
    except ValueError:
        raise ZoneError(f"{zone.name}: temp is not an integer: {text!r}") from None


async def serve_zone(
    client: DeviceClient,
    device: DeviceInfo,
    *,
    sysfs_root: str,
    interval: float,
    history: bool,
) -> None:
    """Report one device's zone temperature every period until cancelled."""
    prop = device.properties.get("temperature")
    period = prop.report_cycle / 1e9 if prop is not None and prop.report_cycle > 0 else interval
    while True:
        try:
            zone = find_zone(sysfs_root, dict(device.config_data))
            values: dict[str, object] = {"temperature": read_celsius(zone)}
            if "zone-type" in device.properties:
                values["zone-type"] = zone.type
            await client.report(device.namespace, device.name, values, history=history)
        except ZoneError as exc:
            log.warning("%s/%s: %s", device.namespace, device.name, exc)
        except DeviceAPIError as exc:
            log.error("%s/%s: report refused: %s", device.namespace, device.name, exc)
        except APIUnavailable as exc:
            log.warning("%s/%s: agent unreachable: %s", device.namespace, device.name, exc)
        await asyncio.sleep(period)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m edgeagent.mappers.thermal",
        description="Report Linux thermal zones as temperature devices to the EdgeFleet agent.",
    )
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKET,
        help="the agent's device API socket (default: %(default)s)",
    )
    parser.add_argument(
        "--sysfs-root", default="/sys", help="where sysfs is mounted (default: %(default)s)"
    )
    parser.add_argument(
        "--protocol", default=PROTOCOL, help="protocolName to serve (default: %(default)s)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=10.0,
        help="seconds between reports when the Device sets no reportCycle (default: %(default)s)",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help="ask the agent to keep every reading while the cloud is unreachable",
    )
    parser.add_argument(
        "--resync", type=float, default=30.0, help="seconds between device list refreshes"
    )
    parser.add_argument("--list-zones", action="store_true", help="print the zones and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.interval <= 0:
        print("--interval must be positive", file=sys.stderr)
        return 2
    if args.list_zones:
        for zone in list_zones(args.sysfs_root):
            try:
                temp = f"{read_celsius(zone):.1f} °C"
            except ZoneError as exc:
                temp = f"unreadable ({exc})"
            print(f"{zone.name}\t{zone.type or '-'}\t{temp}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    client = DeviceClient(args.socket)

    async def handler(c: DeviceClient, device: DeviceInfo) -> None:
        await serve_zone(
            c, device, sysfs_root=args.sysfs_root, interval=args.interval, history=args.history
        )

    async def run(stop: asyncio.Event) -> None:
        await serve_devices(client, args.protocol, handler, stop=stop, resync_interval=args.resync)

    return run_main(run)


if __name__ == "__main__":
    sys.exit(main())
