"""Our CRDs in deploy/crds accept real KubeEdge v1beta1 manifests and refuse bad ones.

The CRD's openAPIV3Schema is checked with jsonschema (``nullable`` translated to a JSON
Schema null type; the ``x-kubernetes-*`` markers change nothing for validation here), so
this holds without an API server; installing the CRDs into the embedded API is tested
once that server exists (docs/devices.md).
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import jsonschema
import pytest
import yaml

from cloudhub.devices import convert_document, load_file

from .test_shared_manifests import V1ALPHA2, V1BETA1

REPO = pathlib.Path(__file__).resolve().parents[3]
CRDS = REPO / "deploy" / "crds"


def to_json_schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: to_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
        if out.pop("nullable", False) and "type" in out:
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    return node


def crd(kind: str) -> dict[str, Any]:
    for path in CRDS.glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        if doc["spec"]["names"]["kind"] == kind:
            return doc
    raise AssertionError(f"no CRD for {kind}")


def validator(kind: str) -> jsonschema.Draft7Validator:
    (version,) = crd(kind)["spec"]["versions"]
    schema = to_json_schema(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(kind: str, doc: Any) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(kind).iter_errors(doc)
    ]


def test_crds_serve_kubeedge_v1beta1_with_status_for_devices() -> None:
    for kind, plural in (("Device", "devices"), ("DeviceModel", "devicemodels")):
        doc = crd(kind)
        assert doc["metadata"]["name"] == f"{plural}.devices.kubeedge.io"
        assert doc["spec"]["group"] == "devices.kubeedge.io"
        assert doc["spec"]["scope"] == "Namespaced"
        (version,) = doc["spec"]["versions"]
        assert version["name"] == "v1beta1" and version["served"] and version["storage"]
    (device_version,) = crd("Device")["spec"]["versions"]
    assert device_version["subresources"] == {"status": {}}


@pytest.mark.parametrize("rel", V1BETA1)
def test_real_v1beta1_manifests_fit_the_crd(kubeedge_dir: pathlib.Path, rel: str) -> None:
    (doc,) = load_file(kubeedge_dir / rel)
    assert errors(doc.content["kind"], doc.content) == []


@pytest.mark.parametrize("rel", V1ALPHA2)
def test_converted_v1alpha2_manifests_fit_the_crd(kubeedge_dir: pathlib.Path, rel: str) -> None:
    (doc,) = load_file(kubeedge_dir / rel)
    converted = convert_document(doc.content).document
    assert errors(converted["kind"], converted) == []


def test_examples_fit_the_crd() -> None:
    for path in (REPO / "deploy" / "examples" / "devices").glob("*.yaml"):
        for doc in load_file(path):
            assert errors(doc.content["kind"], doc.content) == [], path


def test_crd_refuses_what_the_parser_refuses() -> None:
    (model_doc,) = load_file(REPO / "deploy/examples/devices/thermostat.yaml")[:1]
    model = copy.deepcopy(model_doc.content)
    model["spec"]["properties"][0]["type"] = "INTEGER"
    model["spec"]["properties"][1]["accessMode"] = "Write"
    model["spec"]["properties"][1]["maximum"] = 85
    found = errors("DeviceModel", model)
    assert any(e.startswith("spec.properties.0.type:") for e in found)
    assert any(e.startswith("spec.properties.1.accessMode:") for e in found)
    assert any(e.startswith("spec.properties.1.maximum:") for e in found)
    device = copy.deepcopy(load_file(REPO / "deploy/examples/devices/thermostat.yaml")[1].content)
    device["spec"]["properties"][0]["desired"]["value"] = 21
    del device["spec"]["deviceModelRef"]
    found = errors("Device", device)
    assert any(e.startswith("spec.properties.0.desired.value:") for e in found)
    assert any("deviceModelRef" in e for e in found)


def test_status_written_by_the_hub_fits_the_crd() -> None:
    device = copy.deepcopy(load_file(REPO / "deploy/examples/devices/thermostat.yaml")[1].content)
    device["status"] = {
        "twins": [
            {
                "propertyName": "setpoint",
                "reported": {"value": "21.0", "metadata": {"version": "5", "timestamp": "1"}},
                "observedDesired": {"value": "21.0", "metadata": {"version": "2"}},
                "rejectedDesired": {
                    "value": "99",
                    "reason": "OutOfRange",
                    "message": "too hot",
                    "generation": 3,
                },
            }
        ]
    }
    assert errors("Device", device) == []
