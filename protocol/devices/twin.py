"""The twin payloads both halves exchange, as plain frozen data.

These are the bodies of the twin messages in ``docs/protocol.md``; the session code maps
them onto its message classes ``twin_desired`` and ``twin_reported`` (history goes up as
``twin_reported`` too). Keeping them here lets the hub's and the agent's twin logic be
written and tested without a session.

Versions (docs/devices.md):

- the desired version grows with the Device's ``metadata.generation`` (the API server
  bumps it on every spec change) and, for one generation, with its DeviceModel's
  resourceVersion (the hub's ``desired_version``); the edge applies a ``DesiredState``
  only if its version is higher than the one it holds for that uid;
- a reported version is assigned on the edge per (device uid, property), strictly
  increasing: ``max(previous + 1, timestamp in ms)``, so that versions stay ordered
  across an edge store reset or a device moving to another node (with clocks roughly
  right) and the hub can keep the latest per property.
- identity is the uid: nothing keyed by one uid is ever applied to another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.devices.values import Value


@dataclass(frozen=True, slots=True)
class DesiredState:
    """The full desired state of one device (body of ``twin_desired``).

    Attributes:
        namespace: the Device's namespace.
        name: the Device's name.
        uid: the Device's uid (its identity).
        version: grows with the Device's ``metadata.generation`` and its model's revision
            (opaque to the edge: higher wins).
        properties: property name -> wire value, only the valid desired values; a property
            absent here has no desired value (a rejected one is shown in the Device
            status and not sent).
    """

    namespace: str
    name: str
    uid: str
    version: int
    properties: Mapping[str, Value] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReportedValue:
    """One reported property value (body of ``twin_reported``; one sample of ``twin_history``).

    Attributes:
        namespace: the Device's namespace.
        name: the Device's name.
        uid: the Device's uid; a report for another uid than the current Device's is stale.
        property: the property name.
        value: wire value, checked against the model on the edge.
        version: per (uid, property), assigned on the edge, strictly increasing.
        timestamp: when the mapper read the value, seconds since the epoch.
    """

    namespace: str
    name: str
    uid: str
    property: str
    value: Value
    version: int
    timestamp: float
