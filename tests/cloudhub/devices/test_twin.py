"""Hub-side twin rules: desired state and rejections, reported and observed into status."""

from __future__ import annotations

from typing import Any

from cloudhub.devices import (
    evaluate_desired,
    merge_reported,
    status_with_rejections,
)
from cloudhub.devices.twin import desired_version, model_revision
from protocol.devices import (
    ReportedValue,
    parse_device,
    parse_device_model,
)

from .test_crds import errors

MODEL = parse_device_model(
    {
        "apiVersion": "devices.kubeedge.io/v1beta1",
        "kind": "DeviceModel",
        "metadata": {"name": "thermostat", "namespace": "default"},
        "spec": {
            "properties": [
                {"name": "setpoint", "type": "DOUBLE", "accessMode": "ReadWrite", "maximum": "35"},
                {"name": "temperature", "type": "DOUBLE", "accessMode": "ReadOnly"},
                {"name": "mode", "type": "STRING", "accessMode": "ReadWrite"},
                {"name": "blob", "type": "BYTES", "accessMode": "ReadWrite"},
            ]
        },
    }
)


def device_doc(desired: dict[str, str], *, uid: str = "u-1", generation: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "devices.kubeedge.io/v1beta1",
        "kind": "Device",
        "metadata": {"name": "t1", "namespace": "default", "uid": uid, "generation": generation},
        "spec": {
            "deviceModelRef": {"name": "thermostat"},
            "nodeName": "edge-1",
            "properties": [{"name": k, "desired": {"value": v}} for k, v in desired.items()]
            + [{"name": "temperature"}],
        },
    }


def report(prop: str, value: object, version: int, *, uid: str = "u-1") -> ReportedValue:
    return ReportedValue("default", "t1", uid, prop, value, version, 1_700_000_000.25)  # type: ignore[arg-type]


def test_desired_state_carries_generation_uid_and_typed_values() -> None:
    device = parse_device(device_doc({"setpoint": "22", "mode": "eco", "blob": "AQI="}))
    evaluation = evaluate_desired(device, MODEL)
    assert evaluation.rejections == ()
    state = evaluation.state
    assert (state.uid, state.namespace, state.name) == ("u-1", "default", "t1")
    assert state.version == desired_version(4, 0)
    assert state.properties == {"setpoint": 22.0, "mode": "eco", "blob": b"\x01\x02"}


def test_desired_versions_grow_with_the_generation_then_the_model() -> None:
    # A spec change outranks any model revision; within a generation a newer model
    # (changed, or deleted and created again: a later resourceVersion) outranks an older.
    assert desired_version(4, 10**9) < desired_version(5, 1)
    assert desired_version(4, 7) < desired_version(4, 8)
    device = parse_device(device_doc({"setpoint": "22"}))
    older = evaluate_desired(device, MODEL, model_revision=41).state.version
    newer = evaluate_desired(device, MODEL, model_revision=57).state.version
    assert older < newer
    assert model_revision({"metadata": {"resourceVersion": "57"}}) == 57
    assert model_revision({"metadata": {"resourceVersion": "opaque"}}) == 0
    assert model_revision(None) == 0


def test_invalid_desired_values_are_rejected_not_sent() -> None:
    doc = device_doc({"setpoint": "99", "mode": "eco"})
    doc["spec"]["properties"] += [
        {"name": "temperature", "desired": {"value": "20"}},
        {"name": "humidity", "desired": {"value": "50"}},
    ]
    del doc["spec"]["properties"][2]  # the temperature entry without desired
    device = parse_device(doc)
    evaluation = evaluate_desired(device, MODEL)
    assert evaluation.state.properties == {"mode": "eco"}
    reasons = {r.property: r.reason for r in evaluation.rejections}
    assert reasons == {
        "setpoint": "OutOfRange",
        "temperature": "ReadOnly",
        "humidity": "UnknownProperty",
    }
    no_model = evaluate_desired(device, None)
    assert no_model.state.properties == {}
    assert {r.reason for r in no_model.rejections} == {"ModelNotFound"}


def test_rejections_shown_in_status_then_cleared_when_fixed() -> None:
    device = parse_device(device_doc({"setpoint": "99"}))
    merge = status_with_rejections(device, evaluate_desired(device, MODEL))
    assert merge.changed
    (twin,) = merge.status["twins"]
    assert twin["propertyName"] == "setpoint"
    assert twin["rejectedDesired"]["reason"] == "OutOfRange"
    assert twin["rejectedDesired"]["value"] == "99" and twin["rejectedDesired"]["generation"] == 4
    assert "above the maximum" in twin["rejectedDesired"]["message"]
    doc = device_doc({"setpoint": "99"})
    doc["status"] = merge.status
    assert errors("Device", doc) == []
    # the informer sees our own status write: nothing more to write
    again = parse_device(doc)
    assert not status_with_rejections(again, evaluate_desired(again, MODEL)).changed
    # the user fixes the value (generation 5): the rejection goes away
    fixed_doc = device_doc({"setpoint": "30"}, generation=5)
    fixed_doc["status"] = merge.status
    fixed = parse_device(fixed_doc)
    cleared = status_with_rejections(fixed, evaluate_desired(fixed, MODEL))
    assert cleared.changed and "twins" not in cleared.status


def test_reported_latest_version_wins_per_property() -> None:
    device = parse_device(device_doc({}))
    merge = merge_reported(
        device, MODEL, [report("temperature", 21.5, 10), report("temperature", 20.0, 7)]
    )
    assert [r.version for r in merge.applied] == [7, 10]
    (twin,) = merge.status["twins"]
    assert twin["reported"] == {
        "value": "21.5",
        "metadata": {"timestamp": "1700000000250", "version": "10", "type": "double"},
    }
    doc = device_doc({})
    doc["status"] = merge.status
    assert errors("Device", doc) == []
    current = parse_device(doc)
    older = merge_reported(
        current, MODEL, [report("temperature", 19.0, 9), report("temperature", 1.0, 10)]
    )
    assert not older.changed and len(older.stale) == 2
    newer = merge_reported(current, MODEL, [report("temperature", 23.0, 11)])
    assert newer.changed and newer.status["twins"][0]["reported"]["value"] == "23.0"


def test_reports_for_another_uid_never_mix() -> None:
    device = parse_device(device_doc({}, uid="new-uid"))
    merge = merge_reported(device, MODEL, [report("temperature", 21.0, 99, uid="old-uid")])
    assert not merge.changed and merge.stale and not merge.applied


def test_invalid_reports_are_returned_not_written() -> None:
    device = parse_device(device_doc({}))
    merge = merge_reported(
        device, MODEL, [report("temperature", "hot", 3), report("humidity", 1.0, 4)]
    )
    assert not merge.changed
    assert [exc.reason for _, exc in merge.invalid] == ["TypeMismatch", "UnknownProperty"]
    no_model = merge_reported(device, None, [report("temperature", 1.0, 5)])
    assert no_model.invalid[0][1].reason == "ModelNotFound"


def test_reported_and_rejections_coexist() -> None:
    device = parse_device(device_doc({"setpoint": "99"}))
    status = status_with_rejections(device, evaluate_desired(device, MODEL)).status
    doc = device_doc({"setpoint": "99"})
    doc["status"] = status
    merged = merge_reported(parse_device(doc), MODEL, [report("setpoint", 21.0, 3)])
    (twin,) = merged.status["twins"]
    assert set(twin) == {"propertyName", "rejectedDesired", "reported"}
    assert merged.status is not status and "reported" not in status["twins"][0]
