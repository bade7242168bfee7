"""Every KubeEdge device file in shared data: v1beta1 accepted as is, v1alpha2 converted
then accepted, defective files refused with their own error (PROVENANCE.md)."""

from __future__ import annotations

import pathlib
import re

import pytest

from cloudhub.devices import ManifestError, convert_document, load_file
from protocol.devices import (
    Device,
    DeviceModel,
    PropertyType,
    check_device_against_model,
    parse_document,
)

V1BETA1 = [
    "examples/new-counter-demo/crds/counter-model.yaml",
    "examples/new-counter-demo/crds/counter-instance.yaml",
    "examples/sound-equipment-fault-detection/vled/resource/vled-model.yaml",
    "examples/sound-equipment-fault-detection/vled/resource/vled-instance.yaml",
    "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-model.yaml",
    "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-instance.yaml",
]
V1ALPHA2 = [
    "examples/kubeedge-counter-demo/crds/kubeedge-counter-model.yaml",
    "examples/kubeedge-counter-demo/crds/kubeedge-counter-instance.yaml",
    "examples/led-raspberrypi/crds/led-light-device-model.yaml",
    "examples/bluetooth-CC2650-demo/crds/CC2650-device-model.yaml",
]
DEFECTIVE = {
    "mappers-go/mappers/device-v1beta1/mqtt-mapper/resource/mqttdevice-instance.yaml": (
        2,
        "mapping values are not allowed here",
    ),
    "examples/kubeedge-counter-demo/crds/kubeedge-pi-counter-app.yaml": (
        24,
        "duplicate key 'nodeSelector' (first at line 17)",
    ),
}
# Device -> model pairs named in PROVENANCE.md.
PAIRS = [
    (
        "examples/new-counter-demo/crds/counter-instance.yaml",
        "examples/new-counter-demo/crds/counter-model.yaml",
    ),
    (
        "examples/sound-equipment-fault-detection/vled/resource/vled-instance.yaml",
        "examples/sound-equipment-fault-detection/vled/resource/vled-model.yaml",
    ),
    (
        "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-instance.yaml",
        "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-model.yaml",
    ),
]


def only(path: pathlib.Path) -> object:
    docs = load_file(path)
    assert len(docs) == 1, f"{path} holds {len(docs)} documents"
    return docs[0].content


def test_the_table_covers_every_device_file(kubeedge_dir: pathlib.Path) -> None:
    found = {
        str(p.relative_to(kubeedge_dir))
        for p in kubeedge_dir.rglob("*.yaml")
        if re.search(r"^\s*apiVersion:\s*devices\.kubeedge\.io/", p.read_text("utf-8"), re.M)
    }
    assert found == set(V1BETA1) | set(V1ALPHA2) | {
        "mappers-go/mappers/device-v1beta1/mqtt-mapper/resource/mqttdevice-instance.yaml"
    }


@pytest.mark.parametrize("rel", V1BETA1)
def test_v1beta1_files_are_accepted_unchanged(kubeedge_dir: pathlib.Path, rel: str) -> None:
    doc = only(kubeedge_dir / rel)
    parsed = parse_document(doc)
    assert parsed.name
    result = convert_document(doc)
    assert not result.converted and result.document == doc and result.notes == ()


@pytest.mark.parametrize("rel", V1ALPHA2)
def test_v1alpha2_files_convert_then_are_accepted(kubeedge_dir: pathlib.Path, rel: str) -> None:
    doc = only(kubeedge_dir / rel)
    with pytest.raises(ValueError, match="cloudhub devices convert"):
        parse_document(doc)
    result = convert_document(doc)
    assert result.converted
    parsed = parse_document(result.document)
    assert parsed.name == doc["metadata"]["name"]


@pytest.mark.parametrize(("rel", "expected"), sorted(DEFECTIVE.items()))
def test_defective_files_are_refused_with_their_error(
    kubeedge_dir: pathlib.Path, rel: str, expected: tuple[int, str]
) -> None:
    line, problem = expected
    with pytest.raises(ManifestError) as exc:
        load_file(kubeedge_dir / rel)
    assert exc.value.line == line
    assert problem in exc.value.problem
    assert exc.value.path.endswith(rel) and str(exc.value).startswith(exc.value.path)


@pytest.mark.parametrize(("device_rel", "model_rel"), PAIRS)
def test_devices_fit_their_models(
    kubeedge_dir: pathlib.Path, device_rel: str, model_rel: str
) -> None:
    device = parse_document(only(kubeedge_dir / device_rel))
    model = parse_document(only(kubeedge_dir / model_rel))
    assert isinstance(device, Device) and isinstance(model, DeviceModel)
    assert check_device_against_model(device, model) == []


def test_kubeedge_details_survive_parsing(kubeedge_dir: pathlib.Path) -> None:
    onvif = parse_document(
        only(
            kubeedge_dir
            / "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-model.yaml"
        )
    )
    assert isinstance(onvif, DeviceModel)
    assert [p.type for p in onvif.properties] == [
        PropertyType.STRING,
        PropertyType.STREAM,
        PropertyType.STREAM,
    ]
    counter = parse_document(
        only(kubeedge_dir / "examples/new-counter-demo/crds/counter-instance.yaml")
    )
    assert isinstance(counter, Device)
    assert counter.protocol_name == "virtualProtocol" and counter.protocol_config is None
    assert counter.node_name == "kind-worker" and len(counter.methods) == 2
    vled = parse_document(
        only(
            kubeedge_dir
            / "examples/sound-equipment-fault-detection/vled/resource/vled-instance.yaml"
        )
    )
    assert isinstance(vled, Device)
    assert vled.namespace == "" and vled.protocol_config["baudRate"] == 9600
    assert vled.property("status").report_cycle == 1_000_000_000
    assert vled.status["twins"][0]["reported"]["value"] == "100"
