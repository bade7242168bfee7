"""The edge's device twins: desired state from the hub, reports from mappers, kept offline.

``EdgeTwins`` is pure logic over a ``TwinStore`` (no asyncio, no clock: ``now`` comes in as
an argument). The agent feeds it three things and drains two:

- objects: ``upsert_device``/``remove_device``/``upsert_model``/``remove_model`` from the
  Device and DeviceModel objects the hub sends (``object_upsert``/``object_delete``) and,
  at start, from the agent's object store, *before* the uplink starts;
- desired: ``apply_desired(DesiredState)`` for each ``twin_desired``;
- reports: ``report()`` from the local device API;
- drained by the uplink when connected (``edgeagent.uplink.sources.twins``):
  ``pending_reports()`` and ``pending_history()``, both sent as ``twin_reported``;
  acknowledged with ``report_delivered``/``history_delivered``.

Rules (docs/devices.md):

- Identity is the Device uid. A Device recreated under the same name (new uid) replaces
  the old one here, and everything kept for the old uid is dropped.
- Desired: applied only if its version (the Device's generation) is higher than the one
  held; an equal or older one is discarded. After a reconnect the hub sends the full
  desired state of every device, so anything missed is caught up and any late older
  notification is discarded. The cloud wins.
- Desired values the current model no longer allows (a DeviceModel changed after the
  Device) are held back from mappers (``DesiredView.masked``): the hub shows them as
  rejected in the Device status with the same rules.
- Reported: each accepted value gets a version, per (uid, property), strictly increasing:
  ``max(previous + 1, now in ms)``. The latest per property is kept until the hub
  acknowledges it (store-and-forward); with ``history=True`` every value is also kept in a
  bounded per-property history (oldest dropped first) and delivered after reconnect.
  The device wins: the hub writes what the edge reports.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgeagent.devices.errors import BadRequest, DeviceNotFound, ModelUnavailable
from edgeagent.store.twins import DesiredRecord, TwinStore
from protocol.devices import (
    AccessMode,
    DesiredState,
    Device,
    DeviceModel,
    InvalidValue,
    Reason,
    ReportedValue,
    Value,
    check_reported,
    coerce,
    parse_device,
    parse_device_model,
)

DEFAULT_NAMESPACE = "default"


class DesiredOutcome(enum.Enum):
    """What ``apply_desired`` did."""

    APPLIED = "applied"
    """Newer than what the edge held: stored, mappers notified."""
    STALE = "stale"
    """Same or older version than what the edge holds: discarded."""
    UNKNOWN_DEVICE = "unknown-device"
    """No Device with that uid on this node (deleted, or not sent yet): discarded."""


class EventKind(enum.Enum):
    """What changed, for ``EdgeTwins`` listeners."""

    DEVICE = "device"
    """A device was added or its spec/model changed."""
    REMOVED = "removed"
    """A device was removed from this node."""
    DESIRED = "desired"
    """A newer desired state was applied."""
    REPORTED = "reported"
    """Reports are pending delivery to the hub."""


@dataclass(frozen=True, slots=True)
class TwinEvent:
    """A change, given to listeners synchronously after the store write.

    Attributes:
        kind: what changed.
        uid: the device uid.
        namespace: the device namespace.
        name: the device name.
    """

    kind: EventKind
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class DesiredView:
    """The desired state of a device as mappers see it.

    Attributes:
        uid: the device uid (changes when the Device is recreated).
        version: the desired version, 0 before the first ``twin_desired``.
        properties: property -> wire value, the values mappers should apply.
        masked: property -> reason, desired values held back because the current model
            does not allow them.
    """

    uid: str
    version: int
    properties: Mapping[str, Value] = field(default_factory=dict)
    masked: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reading:
    """One value a mapper reports.

    Attributes:
        property: the property name.
        value: JSON value or its text spelling (checked against the model).
        timestamp: when the mapper read it, s since epoch; ``None`` means "now".
    """

    property: str
    value: Any
    timestamp: float | None = None


Listener = Callable[[TwinEvent], None]


class EdgeTwins:
    """Device twins of one edge node (see the module docstring for the rules).

    Args:
        store: where twin state persists.
        history_limit: history entries kept per (device, property) for reports made with
            ``history=True``; 1,000 entries of a few dozen bytes each bounds one property
            to well under 100 KiB of store.
    """

    def __init__(self, store: TwinStore, *, history_limit: int = 1000) -> None:
        if history_limit < 1:
            raise ValueError(f"history_limit must be at least 1, got {history_limit}")
        self._store = store
        self._history_limit = history_limit
        self._devices: dict[str, Device] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        self._models: dict[tuple[str, str], DeviceModel] = {}
        self._listeners: list[Listener] = []
        self.history_dropped = 0
        """History entries dropped so far to keep the bound (for metrics)."""

    # -- listeners ------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` after every change; returns a function that removes it.

        Listeners run synchronously inside the call that made the change and must not
        raise or block (set an asyncio event, wake a waiter).
        """
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def _emit(self, kind: EventKind, device: Device | DesiredRecord) -> None:
        event = TwinEvent(kind, device.uid, _ns(device.namespace), device.name)
        for listener in list(self._listeners):
            listener(event)

    # -- objects --------------------------------------------------------------------

    def upsert_device(self, obj: Mapping[str, Any]) -> Device:
        """Add or update a Device assigned to this node (raw API JSON).

        A Device with the same namespace/name but another uid replaces the old one, whose
        twin state is dropped: it is a new device.

        Raises:
            InvalidDocument: the object breaks the v1beta1 schema (nothing changes).
            ValueError: the object has no uid (it did not come from the API).
        """
        device = parse_device(obj)
        if not device.uid:
            raise ValueError(f"Device {device.namespace}/{device.name} has no metadata.uid")
        key = (_ns(device.namespace), device.name)
        previous_uid = self._by_name.get(key)
        if previous_uid is not None and previous_uid != device.uid:
            self.remove_device(previous_uid)
        self._devices[device.uid] = device
        self._by_name[key] = device.uid
        self._emit(EventKind.DEVICE, device)
        return device

    def remove_device(self, uid: str) -> None:
        """Forget a device (deleted, or moved to another node) and all its twin state."""
        device = self._devices.pop(uid, None)
        self._store.delete_device(uid)
        if device is None:
            return
        key = (_ns(device.namespace), device.name)
        if self._by_name.get(key) == uid:
            del self._by_name[key]
        self._emit(EventKind.REMOVED, device)

    def upsert_model(self, obj: Mapping[str, Any]) -> DeviceModel:
        """Add or update a DeviceModel (raw API JSON).

        Raises:
            InvalidDocument: the object breaks the v1beta1 schema (nothing changes).
        """
        model = parse_device_model(obj)
        self._models[(_ns(model.namespace), model.name)] = model
        for device in self._devices.values():
            if device.model_name == model.name and _ns(device.namespace) == _ns(model.namespace):
                self._emit(EventKind.DEVICE, device)
        return model

    def remove_model(self, namespace: str, name: str) -> None:
        """Forget a DeviceModel; its devices stay, but their values cannot be checked."""
        self._models.pop((_ns(namespace), name), None)

    def devices(self) -> list[Device]:
        """The devices on this node, sorted by namespace and name."""
        return sorted(self._devices.values(), key=lambda d: (_ns(d.namespace), d.name))

    def device(self, namespace: str, name: str) -> Device:
        """The device called namespace/name.

        Raises:
            DeviceNotFound: no such device on this node.
        """
        uid = self._by_name.get((_ns(namespace), name))
        if uid is None:
            raise DeviceNotFound(_ns(namespace), name)
        return self._devices[uid]

    def model_for(self, device: Device) -> DeviceModel | None:
        """The device's DeviceModel, or ``None`` if it has not reached this node."""
        return self._models.get((_ns(device.namespace), device.model_name))

    # -- desired --------------------------------------------------------------------

    def apply_desired(self, state: DesiredState, now: float) -> DesiredOutcome:
        """Apply a ``twin_desired`` from the hub if it is newer than what the edge holds.

        Args:
            state: the full desired state of one device.
            now: current time, s since epoch (recorded as ``received_at``).

        Returns:
            What happened; only ``APPLIED`` changes anything and notifies listeners.
        """
        device = self._devices.get(state.uid)
        if device is None:
            return DesiredOutcome.UNKNOWN_DEVICE
        current = self._store.get_desired(state.uid)
        if current is not None and state.version <= current.version:
            return DesiredOutcome.STALE
        record = DesiredRecord(
            uid=state.uid,
            namespace=_ns(device.namespace),
            name=device.name,
            version=state.version,
            properties=dict(state.properties),
            received_at=now,
        )
        self._store.put_desired(record)
        self._emit(EventKind.DESIRED, device)
        return DesiredOutcome.APPLIED

    def desired(self, namespace: str, name: str) -> DesiredView:
        """The desired state mappers should apply for a device.

        Raises:
            DeviceNotFound: no such device on this node.
        """
        device = self.device(namespace, name)
        record = self._store.get_desired(device.uid)
        if record is None:
            return DesiredView(uid=device.uid, version=0)
        model = self.model_for(device)
        values: dict[str, Value] = {}
        masked: dict[str, str] = {}
        for prop_name, value in record.properties.items():
            reason = _desired_problem(model, prop_name, value)
            if reason is None:
                values[prop_name] = value
            else:
                masked[prop_name] = reason
        return DesiredView(device.uid, record.version, values, masked)

    # -- reported -------------------------------------------------------------------

    def report(
        self,
        namespace: str,
        name: str,
        readings: Sequence[Reading],
        *,
        now: float,
        history: bool = False,
    ) -> list[ReportedValue]:
        """Accept values from a mapper: all are checked before any is stored.

        Args:
            namespace: the device namespace.
            name: the device name.
            readings: one or more values, in the order they were read.
            now: current time, s since epoch (versions and missing timestamps).
            history: also keep every value in the bounded per-property history, to be
                delivered after a reconnect (otherwise only the latest per property is kept).

        Returns:
            The stored reports, with their versions, in request order.

        Raises:
            DeviceNotFound: no such device on this node.
            ModelUnavailable: its DeviceModel has not reached this node yet.
            InvalidValue: a value breaks the model (nothing is stored).
            BadRequest: no readings, or a timestamp that is not a positive finite number.
        """
        device = self.device(namespace, name)
        model = self.model_for(device)
        if model is None:
            raise ModelUnavailable(_ns(device.namespace), device.model_name)
        if not readings:
            raise BadRequest("no values to report")
        checked: list[tuple[str, Value, float]] = []
        for reading in readings:
            prop = model.property(reading.property)
            if prop is None:
                raise InvalidValue(
                    reading.property,
                    Reason.UNKNOWN_PROPERTY.value,
                    f"property {reading.property!r} is not defined in DeviceModel {model.name!r}",
                )
            value = check_reported(prop, reading.value)
            ts = now if reading.timestamp is None else reading.timestamp
            if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
                raise BadRequest(f"timestamp of {reading.property!r} must be a number of seconds")
            if ts <= 0:
                raise BadRequest(f"timestamp of {reading.property!r} must be positive")
            checked.append((reading.property, value, float(ts)))
        latest = self._store.latest_reported(device.uid)
        last_version = {p: rv.version for p, rv in latest.items()}
        now_ms = int(now * 1000)
        reports: list[ReportedValue] = []
        newest: dict[str, ReportedValue] = {}
        for prop_name, value, ts in checked:
            version = max(last_version.get(prop_name, 0) + 1, now_ms)
            last_version[prop_name] = version
            report = ReportedValue(
                namespace=_ns(device.namespace),
                name=device.name,
                uid=device.uid,
                property=prop_name,
                value=value,
                version=version,
                timestamp=ts,
            )
            reports.append(report)
            newest[prop_name] = report
        self.history_dropped += self._store.save_reports(
            list(newest.values()), reports if history else [], self._history_limit
        )
        self._emit(EventKind.REPORTED, device)
        return reports

    def reported(self, namespace: str, name: str) -> dict[str, ReportedValue]:
        """The latest report of each property of a device.

        Raises:
            DeviceNotFound: no such device on this node.
        """
        return self._store.latest_reported(self.device(namespace, name).uid)

    def pending_reports(self, limit: int = 256) -> list[ReportedValue]:
        """Latest reports not yet acknowledged by the hub (send as ``twin_reported``)."""
        return self._store.pending_reported(limit)

    def report_delivered(self, report: ReportedValue) -> None:
        """The hub acknowledged ``report``; a newer report of the property stays pending."""
        self._store.mark_reported_delivered(report.uid, report.property, report.version)

    def pending_history(self, limit: int = 256) -> list[ReportedValue]:
        """History entries not yet acknowledged (send grouped per property as ``twin_history``)."""
        return self._store.pending_history(limit)

    def history_delivered(self, uid: str, property: str, up_to_version: int) -> None:
        """The hub acknowledged history of (uid, property) up to ``up_to_version``."""
        self._store.drop_history(uid, property, up_to_version)


def _ns(namespace: str) -> str:
    return namespace or DEFAULT_NAMESPACE


def _desired_problem(model: DeviceModel | None, name: str, value: Value) -> str | None:
    """Why a held desired value must not reach mappers under the current model, or None."""
    if model is None:
        return Reason.MODEL_NOT_FOUND.value
    prop = model.property(name)
    if prop is None:
        return Reason.UNKNOWN_PROPERTY.value
    if prop.access_mode is AccessMode.READ_ONLY:
        return Reason.READ_ONLY.value
    try:
        coerce(prop, value)
    except InvalidValue as exc:
        return exc.reason
    return None
