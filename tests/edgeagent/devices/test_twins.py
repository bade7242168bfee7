"""The edge twin state machine: version rules, identity, reports kept offline, history bound."""

from __future__ import annotations

import pytest

from edgeagent.devices import (
    BadRequest,
    DesiredOutcome,
    DeviceNotFound,
    EventKind,
    ModelUnavailable,
    Reading,
    TwinEvent,
)
from protocol.devices import InvalidDocument, InvalidValue

from .helpers import THERMOSTAT_MODEL, desired, device, new_twins

NOW = 1_700_000_000.0


def ready(history_limit: int = 1000):
    twins = new_twins(history_limit)
    twins.upsert_model(THERMOSTAT_MODEL)
    twins.upsert_device(device())
    return twins


def test_newer_desired_applied_older_and_equal_discarded() -> None:
    twins = ready()
    events: list[TwinEvent] = []
    twins.add_listener(events.append)
    assert twins.apply_desired(desired("u-1", 2, setpoint=21.0), NOW) is DesiredOutcome.APPLIED
    assert twins.apply_desired(desired("u-1", 1, setpoint=30.0), NOW) is DesiredOutcome.STALE
    assert twins.apply_desired(desired("u-1", 2, setpoint=30.0), NOW) is DesiredOutcome.STALE
    view = twins.desired("default", "thermo-1")
    assert (view.uid, view.version, dict(view.properties)) == ("u-1", 2, {"setpoint": 21.0})
    assert [e.kind for e in events] == [EventKind.DESIRED]
    assert twins.apply_desired(desired("u-1", 5), NOW) is DesiredOutcome.APPLIED
    assert twins.desired("default", "thermo-1").properties == {}  # full state: setpoint cleared


def test_reconnect_full_state_then_late_older_notification_is_discarded() -> None:
    twins = ready()
    twins.apply_desired(desired("u-1", 3, setpoint=20.0), NOW)
    # offline: the cloud went to generation 5; after reconnect the hub sends the full state
    assert twins.apply_desired(desired("u-1", 5, setpoint=25.0), NOW) is DesiredOutcome.APPLIED
    # a notification of generation 4, sent before the disconnect, arrives late
    assert twins.apply_desired(desired("u-1", 4, setpoint=22.0), NOW) is DesiredOutcome.STALE
    assert twins.desired("default", "thermo-1").properties == {"setpoint": 25.0}


def test_unknown_device_desired_is_discarded() -> None:
    twins = ready()
    assert twins.apply_desired(desired("ghost", 1), NOW) is DesiredOutcome.UNKNOWN_DEVICE


def test_delete_and_recreate_is_a_new_device_whose_versions_never_mix() -> None:
    twins = ready()
    twins.apply_desired(desired("u-1", 9, setpoint=30.0), NOW)
    twins.report("default", "thermo-1", [Reading("temperature", 20.0)], now=NOW)
    # recreated under the same name: new uid, generation starts again at 1
    twins.upsert_device(device(uid="u-2"))
    view = twins.desired("default", "thermo-1")
    assert (view.uid, view.version) == ("u-2", 0)
    assert twins.reported("default", "thermo-1") == {}
    assert twins.pending_reports() == []  # the old device's reports cannot reach the new one
    assert twins.apply_desired(desired("u-2", 1, setpoint=10.0), NOW) is DesiredOutcome.APPLIED
    # a late message for the old uid changes nothing
    assert (
        twins.apply_desired(desired("u-1", 10, setpoint=35.0), NOW) is DesiredOutcome.UNKNOWN_DEVICE
    )
    assert twins.desired("default", "thermo-1").properties == {"setpoint": 10.0}


def test_removed_device_is_gone() -> None:
    twins = ready()
    twins.report("default", "thermo-1", [Reading("temperature", 20.0)], now=NOW)
    twins.remove_device("u-1")
    with pytest.raises(DeviceNotFound):
        twins.desired("default", "thermo-1")
    assert twins.pending_reports() == []
    assert twins.devices() == []


def test_reported_versions_strictly_increase_per_property() -> None:
    twins = ready()
    first = twins.report("default", "thermo-1", [Reading("temperature", 20.0)], now=NOW)
    # same millisecond, and a clock that went back: still increasing
    second = twins.report("default", "thermo-1", [Reading("temperature", 20.5)], now=NOW)
    third = twins.report("default", "thermo-1", [Reading("temperature", 21.0)], now=NOW - 60)
    versions = [r.version for r in first + second + third]
    assert versions == [int(NOW * 1000), int(NOW * 1000) + 1, int(NOW * 1000) + 2]
    later = twins.report("default", "thermo-1", [Reading("temperature", 21.0)], now=NOW + 5)
    assert later[0].version == int((NOW + 5) * 1000)


def test_one_invalid_value_stores_nothing() -> None:
    twins = ready()
    with pytest.raises(InvalidValue) as exc:
        twins.report(
            "default",
            "thermo-1",
            [Reading("temperature", 20.0), Reading("setpoint", 99.0)],
            now=NOW,
        )
    assert exc.value.reason == "OutOfRange" and exc.value.property == "setpoint"
    assert twins.pending_reports() == [] and twins.reported("default", "thermo-1") == {}
    with pytest.raises(InvalidValue) as exc:
        twins.report("default", "thermo-1", [Reading("humidity", 1)], now=NOW)
    assert exc.value.reason == "UnknownProperty"


def test_report_errors() -> None:
    twins = new_twins()
    twins.upsert_device(device())
    with pytest.raises(ModelUnavailable):
        twins.report("default", "thermo-1", [Reading("temperature", 1.0)], now=NOW)
    twins.upsert_model(THERMOSTAT_MODEL)
    with pytest.raises(DeviceNotFound):
        twins.report("default", "nope", [Reading("temperature", 1.0)], now=NOW)
    with pytest.raises(BadRequest):
        twins.report("default", "thermo-1", [], now=NOW)
    with pytest.raises(BadRequest):
        twins.report("default", "thermo-1", [Reading("temperature", 1.0, float("nan"))], now=NOW)
    with pytest.raises(InvalidDocument):
        twins.upsert_device({"kind": "Device"})
    with pytest.raises(ValueError, match="uid"):
        twins.upsert_device({**device(), "metadata": {"name": "x", "namespace": "default"}})


def test_offline_reports_keep_latest_per_property_until_acknowledged() -> None:
    twins = ready()
    for i in range(50):  # the cloud is away: nothing is acknowledged
        twins.report(
            "default",
            "thermo-1",
            [Reading("temperature", 20.0 + i / 10), Reading("label", f"n{i}")],
            now=NOW + i,
        )
    pending = {r.property: r for r in twins.pending_reports()}
    assert set(pending) == {"temperature", "label"}
    assert pending["temperature"].value == pytest.approx(24.9)
    assert pending["label"].value == "n49"
    assert twins.pending_history() == []  # no history was asked for
    # reconnect: the uplink sends them; the hub acks the label, then a new temperature comes
    twins.report_delivered(pending["label"])
    twins.report("default", "thermo-1", [Reading("temperature", 30.0)], now=NOW + 100)
    twins.report_delivered(pending["temperature"])  # ack of the older one
    still = twins.pending_reports()
    assert [(r.property, r.value) for r in still] == [("temperature", 30.0)]
    twins.report_delivered(still[0])
    assert twins.pending_reports() == []


def test_history_is_kept_when_asked_and_bounded() -> None:
    twins = ready(history_limit=3)
    readings = [Reading("temperature", float(i), NOW + i) for i in range(5)]
    stored = twins.report("default", "thermo-1", readings, now=NOW + 10, history=True)
    assert [r.value for r in stored] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [r.timestamp for r in stored] == [NOW + i for i in range(5)]
    history = twins.pending_history()
    assert [r.value for r in history] == [2.0, 3.0, 4.0]  # oldest dropped first
    assert twins.history_dropped == 2
    twins.report("default", "thermo-1", [Reading("temperature", 5.0)], now=NOW + 11, history=True)
    assert [r.value for r in twins.pending_history()] == [3.0, 4.0, 5.0]
    assert twins.history_dropped == 3
    # the hub acknowledged the first two
    twins.history_delivered("u-1", "temperature", twins.pending_history()[1].version)
    assert [r.value for r in twins.pending_history()] == [5.0]
    # the latest also travels as an ordinary twin_reported
    assert [r.value for r in twins.pending_reports()] == [5.0]


def test_model_change_masks_desired_values_it_no_longer_allows() -> None:
    twins = ready()
    twins.apply_desired(desired("u-1", 2, setpoint=30.0, label="eco"), NOW)
    stricter = {
        **THERMOSTAT_MODEL,
        "spec": {
            "properties": [
                {"name": "setpoint", "type": "DOUBLE", "accessMode": "ReadWrite", "maximum": "25"},
                {"name": "temperature", "type": "DOUBLE", "accessMode": "ReadOnly"},
                {"name": "label", "type": "STRING", "accessMode": "ReadOnly"},
            ]
        },
    }
    events: list[TwinEvent] = []
    twins.add_listener(events.append)
    twins.upsert_model(stricter)
    view = twins.desired("default", "thermo-1")
    assert view.properties == {}
    assert view.masked == {"setpoint": "OutOfRange", "label": "ReadOnly"}
    assert [e.kind for e in events] == [EventKind.DEVICE]
    twins.remove_model("default", "thermostat")
    assert twins.desired("default", "thermo-1").masked == {
        "setpoint": "ModelNotFound",
        "label": "ModelNotFound",
    }
