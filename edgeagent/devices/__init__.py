"""Device twins on the edge: the twin state machine, its storage interface, the device API.

See docs/devices.md. The device model and value rules are shared with the hub in
``protocol.devices``.
"""

from edgeagent.devices.api import APIStartError, DeviceAPIServer
from edgeagent.devices.errors import BadRequest, DeviceNotFound, ModelUnavailable, TwinError
from edgeagent.devices.settings import DeviceSettings
from edgeagent.devices.store import DesiredRecord, MemoryTwinStore, TwinStore
from edgeagent.devices.twins import (
    DesiredOutcome,
    DesiredView,
    EdgeTwins,
    EventKind,
    Reading,
    TwinEvent,
)

__all__ = [
    "APIStartError",
    "BadRequest",
    "DesiredOutcome",
    "DesiredRecord",
    "DesiredView",
    "DeviceAPIServer",
    "DeviceNotFound",
    "DeviceSettings",
    "EdgeTwins",
    "EventKind",
    "MemoryTwinStore",
    "ModelUnavailable",
    "Reading",
    "TwinError",
    "TwinEvent",
    "TwinStore",
]
