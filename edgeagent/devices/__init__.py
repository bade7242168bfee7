"""Device twins on the edge: the twin state machine, its storage interface, the device API.

See docs/devices.md. The device model and value rules are shared with the hub in
``protocol.devices``.

Names are imported on first use (PEP 562), so that the agent's settings can import
``edgeagent.devices.settings`` without loading the device API and h11.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeagent.lazy import lazy_exports

if TYPE_CHECKING:
    from edgeagent.devices.api import DeviceAPIServer
    from edgeagent.devices.errors import (
        APIStartError,
        BadRequest,
        DeviceNotFound,
        ModelUnavailable,
        TwinError,
    )
    from edgeagent.devices.feed import TwinFeed
    from edgeagent.devices.memory import MemoryTwinStore
    from edgeagent.devices.settings import DeviceSettings
    from edgeagent.devices.twins import (
        DesiredOutcome,
        DesiredRecord,
        DesiredView,
        EdgeTwins,
        EventKind,
        Reading,
        TwinEvent,
        TwinStore,
    )

_WHERE = {
    "APIStartError": "errors",
    "DeviceAPIServer": "api",
    "BadRequest": "errors",
    "DeviceNotFound": "errors",
    "ModelUnavailable": "errors",
    "TwinError": "errors",
    "DeviceSettings": "settings",
    "TwinFeed": "feed",
    "DesiredRecord": "twins",  # defined in edgeagent.store.twins, with the tables
    "MemoryTwinStore": "memory",
    "TwinStore": "twins",
    "DesiredOutcome": "twins",
    "DesiredView": "twins",
    "EdgeTwins": "twins",
    "EventKind": "twins",
    "Reading": "twins",
    "TwinEvent": "twins",
}

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
    "TwinFeed",
    "TwinStore",
]


__getattr__, __dir__ = lazy_exports(globals(), _WHERE)
