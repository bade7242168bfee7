"""DeviceModel/Device parsing: what v1beta1 accepts, and errors that name the field."""

from __future__ import annotations

import copy

import pytest

from protocol.devices import (
    AccessMode,
    InvalidDocument,
    PropertyType,
    check_device_against_model,
    parse_device,
    parse_device_model,
    parse_document,
)

MODEL = {
    "apiVersion": "devices.kubeedge.io/v1beta1",
    "kind": "DeviceModel",
    "metadata": {"name": "thermostat", "namespace": "default"},
    "spec": {
        "protocol": "simulated",
        "properties": [
            {
                "name": "setpoint",
                "type": "DOUBLE",
                "accessMode": "ReadWrite",
                "minimum": "5",
                "maximum": "35",
                "unit": "degree celsius",
            },
            {"name": "temperature", "type": "double", "accessMode": "ReadOnly"},
            {"name": "count", "type": "INT", "accessMode": "ReadWrite", "maximum": "10"},
        ],
    },
}

DEVICE = {
    "apiVersion": "devices.kubeedge.io/v1beta1",
    "kind": "Device",
    "metadata": {"name": "thermo-1", "namespace": "default", "uid": "u-1", "generation": 3},
    "spec": {
        "deviceModelRef": {"name": "thermostat"},
        "nodeName": "edge-1",
        "protocol": {"protocolName": "simulated", "configData": {"rate": 2}},
        "properties": [
            {"name": "setpoint", "desired": {"value": "21.5"}, "reportCycle": 10},
            {"name": "temperature"},
        ],
        "methods": [{"name": "Set", "propertyNames": ["setpoint"]}],
    },
}


def problems_of(exc: pytest.ExceptionInfo[InvalidDocument]) -> dict[str, str]:
    return {p.path: p.message for p in exc.value.problems}


def test_model_parses_with_both_type_spellings_and_bounds() -> None:
    model = parse_device_model(MODEL)
    assert model.name == "thermostat" and model.protocol == "simulated"
    setpoint = model.property("setpoint")
    assert setpoint is not None
    assert setpoint.type is PropertyType.DOUBLE and setpoint.access_mode is AccessMode.READ_WRITE
    assert (setpoint.minimum, setpoint.maximum, setpoint.unit) == (5.0, 35.0, "degree celsius")
    temperature = model.property("temperature")
    assert temperature is not None and temperature.type is PropertyType.DOUBLE
    count = model.property("count")
    assert count is not None and count.maximum == 10 and isinstance(count.maximum, int)
    assert model.property("nope") is None


def test_device_parses_identity_version_and_opaque_parts() -> None:
    device = parse_device(DEVICE)
    assert (device.uid, device.generation, device.node_name) == ("u-1", 3, "edge-1")
    assert device.model_name == "thermostat"
    assert device.protocol_name == "simulated" and device.protocol_config == {"rate": 2}
    setpoint = device.property("setpoint")
    assert setpoint is not None and setpoint.desired == "21.5" and setpoint.report_cycle == 10
    temperature = device.property("temperature")
    assert temperature is not None and temperature.desired is None
    assert device.methods[0].property_names == ("setpoint",)


def test_parse_document_dispatches_on_kind() -> None:
    assert parse_document(MODEL).name == "thermostat"
    assert parse_document(DEVICE).name == "thermo-1"
    with pytest.raises(InvalidDocument) as exc:
        parse_document({"kind": "Deployment"})
    assert "must be DeviceModel or Device" in str(exc.value)


def test_every_model_problem_is_reported_with_its_path() -> None:
    doc = copy.deepcopy(MODEL)
    doc["metadata"]["name"] = "Bad_Name"
    doc["spec"]["properties"] = [
        {"name": "a", "type": "INTEGER", "accessMode": "ReadWrite"},
        {"name": "b", "type": "STRING", "accessMode": "Write"},
        {"name": "c", "type": "INT", "accessMode": "ReadOnly", "minimum": "9", "maximum": "1"},
        {"name": "d", "type": "STRING", "accessMode": "ReadOnly", "maximum": "3"},
        {"name": "e", "type": "INT", "accessMode": "ReadOnly", "maximum": 100},
        {"name": "f", "type": "INT", "accessMode": "ReadOnly", "minimum": "1.5"},
        {"name": "a", "type": "INT", "accessMode": "ReadOnly"},
        {"type": "INT"},
    ]
    with pytest.raises(InvalidDocument) as exc:
        parse_device_model(doc)
    found = problems_of(exc)
    assert "not a valid object name" in found["metadata.name"]
    assert "must be one of INT, FLOAT" in found["spec.properties[0].type"]
    assert "ReadWrite or ReadOnly" in found["spec.properties[1].accessMode"]
    assert "greater than maximum" in found["spec.properties[2].minimum"]
    assert "only to INT, FLOAT and DOUBLE" in found["spec.properties[3].maximum"]
    assert "quote it: '100'" in found["spec.properties[4].maximum"]
    assert "must be an integer" in found["spec.properties[5].minimum"]
    assert "duplicate property name 'a'" in found["spec.properties[6].name"]
    assert found["spec.properties[7].name"] == "required"
    assert found["spec.properties[7].accessMode"].startswith("required")
    assert exc.value.kind == "DeviceModel" and exc.value.name == "default/Bad_Name"


def test_bounds_too_large_for_python_or_int64_are_problems_not_crashes() -> None:
    """A YAML integer has no size limit; Python refuses to print one past 4300 digits."""
    doc = copy.deepcopy(MODEL)
    doc["spec"]["properties"] = [
        {"name": "a", "type": "INT", "accessMode": "ReadOnly", "maximum": 10**5000},
        {"name": "b", "type": "INT", "accessMode": "ReadOnly", "maximum": "9" * 5000},
        {"name": "c", "type": "INT", "accessMode": "ReadOnly", "minimum": "-" + "9" * 20},
    ]
    with pytest.raises(InvalidDocument) as exc:
        parse_device_model(doc)
    found = problems_of(exc)
    assert (
        "must be a string, got the number <16610-bit integer>"
        in found["spec.properties[0].maximum"]
    )
    assert "fits 64 bits" in found["spec.properties[1].maximum"]
    assert "fits 64 bits" in found["spec.properties[2].minimum"]
    assert str(exc.value)


def test_v1alpha2_is_refused_with_one_pointer_to_the_converter() -> None:
    doc = copy.deepcopy(MODEL)
    doc["apiVersion"] = "devices.kubeedge.io/v1alpha2"
    doc["spec"]["properties"][0]["type"] = {"string": {"accessMode": "ReadWrite"}}
    with pytest.raises(InvalidDocument) as exc:
        parse_device_model(doc)
    assert [p.path for p in exc.value.problems] == ["apiVersion"]
    assert "cloudhub devices convert" in exc.value.problems[0].message


def test_nested_v1alpha2_type_in_a_v1beta1_document_points_to_the_converter() -> None:
    doc = copy.deepcopy(MODEL)
    doc["spec"]["properties"][0]["type"] = {"string": {}}
    with pytest.raises(InvalidDocument) as exc:
        parse_device_model(doc)
    assert "v1alpha2 form" in problems_of(exc)["spec.properties[0].type"]


def test_device_problems_name_their_fields() -> None:
    doc = copy.deepcopy(DEVICE)
    doc["spec"]["deviceModelRef"] = {}
    doc["spec"]["nodeName"] = "Edge_1"
    doc["spec"]["properties"] = [
        {"name": "setpoint", "desired": {"value": 21}},
        {"name": "x", "desired": {}},
        {"name": "y", "collectCycle": -1, "reportToCloud": "yes"},
        {"name": "setpoint"},
    ]
    doc["spec"]["protocol"] = {"protocolName": "p", "configData": "not a map"}
    with pytest.raises(InvalidDocument) as exc:
        parse_device(doc)
    found = problems_of(exc)
    assert found["spec.deviceModelRef.name"] == "required"
    assert "not a valid node name" in found["spec.nodeName"]
    assert "quote it: '21'" in found["spec.properties[0].desired.value"]
    assert "required when desired is given" in found["spec.properties[1].desired.value"]
    assert "must not be negative" in found["spec.properties[2].collectCycle"]
    assert "true or false" in found["spec.properties[2].reportToCloud"]
    assert "duplicate property name" in found["spec.properties[3].name"]
    assert "must be a mapping" in found["spec.protocol.configData"]


def test_wrong_kind_and_non_mapping_are_refused() -> None:
    with pytest.raises(InvalidDocument) as exc:
        parse_device(MODEL)
    assert "must be Device" in problems_of(exc)["kind"]
    with pytest.raises(InvalidDocument) as exc:
        parse_device_model(["not", "a", "mapping"])
    assert "must be a mapping" in str(exc.value)


def test_null_config_data_is_accepted_as_absent() -> None:
    doc = copy.deepcopy(DEVICE)
    doc["spec"]["protocol"] = {"protocolName": "virtualProtocol", "configData": None}
    assert parse_device(doc).protocol_config is None


def test_device_checked_against_its_model() -> None:
    model = parse_device_model(MODEL)
    assert check_device_against_model(parse_device(DEVICE), model) == []
    doc = copy.deepcopy(DEVICE)
    doc["spec"]["properties"].append({"name": "humidity"})
    doc["spec"]["methods"] = [{"name": "Set", "propertyNames": ["setpoint", "fan"]}]
    problems = {p.path: p.message for p in check_device_against_model(parse_device(doc), model)}
    assert (
        "'humidity' is not defined in DeviceModel default/thermostat"
        in (problems["spec.properties[2].name"])
    )
    assert "'fan'" in problems["spec.methods[0].propertyNames[1]"]
