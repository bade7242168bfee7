"""v1alpha2 -> v1beta1 conversion and the ``cloudhub devices`` commands."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from click.testing import CliRunner

from cloudhub.devices import ConversionError, InvalidDocument, convert_document, load_file
from cloudhub.devices.cli import devices
from protocol.devices import parse_device, parse_device_model

COUNTER_MODEL = "examples/kubeedge-counter-demo/crds/kubeedge-counter-model.yaml"
COUNTER_DEVICE = "examples/kubeedge-counter-demo/crds/kubeedge-counter-instance.yaml"
CC2650 = "examples/bluetooth-CC2650-demo/crds/CC2650-device-model.yaml"
MQTT_BAD = "mappers-go/mappers/device-v1beta1/mqtt-mapper/resource/mqttdevice-instance.yaml"
DUP_KEY = "examples/kubeedge-counter-demo/crds/kubeedge-pi-counter-app.yaml"
V1BETA1_MODEL = "examples/new-counter-demo/crds/counter-model.yaml"


def test_counter_device_moves_desired_to_spec_and_selector_to_node_name(
    kubeedge_dir: pathlib.Path,
) -> None:
    doc = load_file(kubeedge_dir / COUNTER_DEVICE)[0].content
    result = convert_document(doc)
    out = result.document
    assert out["apiVersion"] == "devices.kubeedge.io/v1beta1"
    assert out["spec"]["nodeName"] == "edge-node"
    assert out["spec"]["properties"] == [{"name": "status", "desired": {"value": "OFF"}}]
    assert out["status"]["twins"][0]["reported"]["value"] == "0"
    assert out["metadata"] == {"name": "counter", "labels": {"description": "counter"}}
    assert result.notes == ()
    assert parse_device(out).property("status").desired == "OFF"


def test_model_conversion_reports_what_v1beta1_cannot_hold(kubeedge_dir: pathlib.Path) -> None:
    result = convert_document(load_file(kubeedge_dir / CC2650)[0].content)
    paths = [n.path for n in result.notes]
    assert paths.count("spec.propertyVisitors") == 1
    assert sum(p.endswith(".defaultValue") for p in paths) == 5
    assert "spec.protocol" in paths
    model = parse_device_model(result.document)
    temperature = model.property("temperature")
    assert temperature is not None and temperature.maximum == 100
    assert temperature.unit == "degree celsius"
    assert result.document["spec"]["properties"][0]["maximum"] == "100"


def test_counter_model_converts(kubeedge_dir: pathlib.Path) -> None:
    result = convert_document(load_file(kubeedge_dir / COUNTER_MODEL)[0].content)
    assert result.document["spec"]["properties"] == [
        {
            "name": "status",
            "description": "counter status",
            "type": "STRING",
            "accessMode": "ReadWrite",
        }
    ]


def test_builtin_protocols_and_visitors_become_opaque_config() -> None:
    doc = {
        "apiVersion": "devices.kubeedge.io/v1alpha2",
        "kind": "Device",
        "metadata": {"name": "sensor", "namespace": "plant", "uid": "x", "resourceVersion": "9"},
        "spec": {
            "deviceModelRef": {"name": "th"},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "", "operator": "In", "values": ["a", "b"]}]}
                ]
            },
            "protocol": {"modbus": {"slaveID": 1}, "common": {"tcp": {"ip": "10.0.0.2"}}},
            "propertyVisitors": [
                {
                    "propertyName": "temp",
                    "collectCycle": 500,
                    "modbus": {"register": "HoldingRegister", "offset": 2, "limit": 1},
                }
            ],
            "data": {"dataTopic": "t"},
        },
    }
    result = convert_document(doc)
    spec = result.document["spec"]
    assert "nodeName" not in spec
    assert spec["protocol"] == {
        "protocolName": "modbus",
        "configData": {"slaveID": 1, "common": {"tcp": {"ip": "10.0.0.2"}}},
    }
    assert spec["properties"] == [
        {
            "name": "temp",
            "collectCycle": 500,
            "visitors": {
                "protocolName": "modbus",
                "configData": {"register": "HoldingRegister", "offset": 2, "limit": 1},
            },
        }
    ]
    assert result.document["metadata"] == {"name": "sensor", "namespace": "plant"}
    notes = {n.path: n.message for n in result.notes}
    assert "exactly one node" in notes["spec.nodeSelector"]
    assert "pushMethod" in notes["spec.data"]
    assert "resourceVersion" in notes["metadata"]
    assert "configData.common" in notes["spec.protocol.common"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"apiVersion": "apps/v1", "kind": "Deployment"}, "not a device document"),
        ({"apiVersion": "devices.kubeedge.io/v1alpha1", "kind": "Device"}, "not convertible"),
        ({"apiVersion": "devices.kubeedge.io/v1alpha2", "kind": "DeviceAccess"}, "neither"),
        ("just text", "not a Kubernetes object"),
        (
            {
                "apiVersion": "devices.kubeedge.io/v1alpha2",
                "kind": "DeviceModel",
                "metadata": {"name": "m"},
                "spec": {"properties": [{"name": "p", "type": {"int": {}, "string": {}}}]},
            },
            "exactly one of",
        ),
        (
            {
                "apiVersion": "devices.kubeedge.io/v1alpha2",
                "kind": "Device",
                "metadata": {"name": "d"},
                "spec": {"propertyVisitors": "oops"},
            },
            "must be a list",
        ),
    ],
)
def test_unconvertible_documents_are_refused(doc: object, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        convert_document(doc)


def test_conversion_result_is_checked_against_v1beta1() -> None:
    doc = {
        "apiVersion": "devices.kubeedge.io/v1alpha2",
        "kind": "DeviceModel",
        "metadata": {"name": "m"},
        "spec": {"properties": [{"name": "p", "type": {"int": {"accessMode": "Sometimes"}}}]},
    }
    with pytest.raises(InvalidDocument) as exc:
        convert_document(doc)
    assert exc.value.problems[0].path == "spec.properties[0].accessMode"


def test_cli_convert_prints_v1beta1_yaml_and_notes(kubeedge_dir: pathlib.Path) -> None:
    files = [str(kubeedge_dir / COUNTER_MODEL), str(kubeedge_dir / COUNTER_DEVICE)]
    result = CliRunner().invoke(devices, ["convert", *files])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert [d["kind"] for d in docs] == ["DeviceModel", "Device"]
    assert all(d["apiVersion"] == "devices.kubeedge.io/v1beta1" for d in docs)
    assert "defaultValue" in result.stderr and COUNTER_MODEL in result.stderr
    strict = CliRunner().invoke(devices, ["convert", "--strict", *files])
    assert strict.exit_code == 1


def test_cli_convert_refuses_defective_files_by_name_and_line(kubeedge_dir: pathlib.Path) -> None:
    good = str(kubeedge_dir / V1BETA1_MODEL)
    bad = [str(kubeedge_dir / MQTT_BAD), str(kubeedge_dir / DUP_KEY)]
    result = CliRunner().invoke(devices, ["convert", good, *bad])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{MQTT_BAD}:2:8: invalid YAML: mapping values are not allowed here" in result.stderr
    assert f"{DUP_KEY}:24:7: invalid YAML: duplicate key 'nodeSelector'" in result.stderr
    assert "already v1beta1" in result.stderr
    (doc,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert doc["metadata"]["name"] == "counter-model"


def test_cli_convert_refuses_non_device_documents(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n---\n")
    result = CliRunner().invoke(devices, ["convert", str(path)])
    assert result.exit_code == 1
    assert "mixed.yaml:1: ConfigMap x: not a device document" in result.stderr
    missing = CliRunner().invoke(devices, ["convert", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 1 and "cannot read" in missing.stderr
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    result = CliRunner().invoke(devices, ["convert", str(binary)])
    assert result.exit_code == 1 and "not UTF-8" in result.stderr


@pytest.mark.parametrize("command", ["convert", "validate"])
def test_cli_refuses_empty_and_too_deep_files_cleanly(tmp_path: pathlib.Path, command: str) -> None:
    """Both commands say what is wrong with a file and exit 1: no traceback, and an
    empty file is not a file that validated."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    for path, message in ((deep, "nested too deeply"), (empty, "no YAML documents")):
        result = CliRunner().invoke(devices, [command, str(path)])
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert f"error: {path}" in result.stderr and message in result.stderr


def test_device_tool_errors_are_hub_errors() -> None:
    from cloudhub.devices.errors import DevicesError
    from cloudhub.errors import HubError

    assert issubclass(DevicesError, HubError)


def test_cli_validate_checks_devices_against_models(tmp_path: pathlib.Path) -> None:
    repo = pathlib.Path(__file__).resolve().parents[3]
    examples = sorted(str(p) for p in (repo / "deploy" / "examples" / "devices").glob("*.yaml"))
    ok = CliRunner().invoke(devices, ["validate", *examples])
    assert ok.exit_code == 0, ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (repo / "deploy/examples/devices/thermostat.yaml")
        .read_text()
        .replace('value: "21"', 'value: "99"')
        .replace("- name: temperature\n      reportCycle", "- name: humidity\n      reportCycle")
    )
    result = CliRunner().invoke(devices, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "'humidity' is not defined in DeviceModel default/thermostat" in result.stderr
    assert "desired value rejected: property 'setpoint': 99.0 is above the maximum 35.0" in (
        result.stderr
    )
