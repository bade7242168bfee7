"""Mappers: the Python SDK for the agent's local device API, and the mappers we ship.

- ``sdk``: ``DeviceClient`` (async, h11 over a Unix socket or loopback TCP);
- ``runner``: ``serve_devices`` runs one task per device of a protocol;
- ``thermal``: Linux thermal zones as temperature devices (``python -m edgeagent.mappers.thermal``);
- ``simulated``: a simulated thermostat for demos (``python -m edgeagent.mappers.simulated``).

Mappers are separate processes; they import nothing from the agent but this package.
"""

from edgeagent.mappers.runner import serve_devices
from edgeagent.mappers.sdk import (
    DEFAULT_SOCKET,
    Accepted,
    APIUnavailable,
    Desired,
    DeviceAPIError,
    DeviceClient,
    DeviceInfo,
    MapperError,
    PropertyInfo,
    Value,
)

__all__ = [
    "DEFAULT_SOCKET",
    "APIUnavailable",
    "Accepted",
    "Desired",
    "DeviceAPIError",
    "DeviceClient",
    "DeviceInfo",
    "MapperError",
    "PropertyInfo",
    "Value",
    "serve_devices",
]
