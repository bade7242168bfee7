"""Shared helpers of the agent's device and mapper tests."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from edgeagent.devices import DeviceAPIServer, DeviceSettings, EdgeTwins, MemoryTwinStore
from protocol.devices import DesiredState

THERMOSTAT_MODEL: dict[str, Any] = {
    "apiVersion": "devices.kubeedge.io/v1beta1",
    "kind": "DeviceModel",
    "metadata": {"name": "thermostat", "namespace": "default", "uid": "m-1"},
    "spec": {
        "protocol": "simulated",
        "properties": [
            {
                "name": "setpoint",
                "type": "DOUBLE",
                "accessMode": "ReadWrite",
                "minimum": "5",
                "maximum": "35",
            },
            {"name": "temperature", "type": "DOUBLE", "accessMode": "ReadOnly"},
            {"name": "label", "type": "STRING", "accessMode": "ReadWrite"},
        ],
    },
}


def device(
    name: str = "thermo-1",
    uid: str = "u-1",
    *,
    model: str = "thermostat",
    protocol: str = "simulated",
    config: dict[str, Any] | None = None,
    properties: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Device object as the API would send it."""
    return {
        "apiVersion": "devices.kubeedge.io/v1beta1",
        "kind": "Device",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "generation": 1},
        "spec": {
            "deviceModelRef": {"name": model},
            "nodeName": "edge-1",
            "protocol": {"protocolName": protocol, "configData": config or {}},
            "properties": properties or [{"name": "setpoint"}, {"name": "temperature"}],
        },
    }


def desired(uid: str, version: int, name: str = "thermo-1", **props: Any) -> DesiredState:
    return DesiredState("default", name, uid, version, props)


async def wait_for(twins: EdgeTwins, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    """Wait until ``predicate()`` holds, re-checking after every twin event."""
    changed = asyncio.Event()
    remove = twins.add_listener(lambda _event: changed.set())

    async def until() -> None:
        while not predicate():
            changed.clear()
            await changed.wait()

    try:
        await asyncio.wait_for(until(), timeout)
    finally:
        remove()


@asynccontextmanager
async def running_api(
    twins: EdgeTwins, *, durable: Any = None, **settings: Any
) -> AsyncIterator[DeviceAPIServer]:
    """A device API server on a Unix socket in a short temporary directory."""
    directory = tempfile.mkdtemp(prefix="ef-dev-", dir="/tmp")
    try:
        config = DeviceSettings(socket_path=f"{directory}/devices.sock", **settings)
        async with DeviceAPIServer(twins, config, durable=durable) as server:
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def new_twins(history_limit: int = 1000) -> EdgeTwins:
    return EdgeTwins(MemoryTwinStore(), history_limit=history_limit)
