"""What the demo applies: shipped copies equal their sources byte for byte, and the
changes that make them run here are what the module says."""

from __future__ import annotations

import pathlib

import pytest

from cloudhub.demo import manifests
from protocol.devices.model import Device, DeviceModel, parse_document

ROOT = pathlib.Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "data" / "manifests"


@pytest.mark.parametrize("name", sorted(manifests.SOURCES))
def test_corpus_copies_are_byte_for_byte(name: str) -> None:
    assert (manifests.DATA / name).read_bytes() == (CORPUS / manifests.SOURCES[name]).read_bytes()


@pytest.mark.parametrize("name", sorted(manifests.OWN_FILES))
def test_own_copies_match_the_repository(name: str) -> None:
    assert (manifests.DATA / name).read_bytes() == (ROOT / manifests.OWN_FILES[name]).read_bytes()


def test_every_shipped_file_is_accounted_for() -> None:
    shipped = {p.name for p in manifests.DATA.iterdir()}
    assert shipped == set(manifests.SOURCES) | set(manifests.OWN_FILES)


def test_demo_objects_run_here() -> None:
    nodes = ["edge-1", "edge-2", "edge-3"]
    objects = manifests.demo_objects(nodes, "localhost/busybox:latest")
    by_kind: dict[str, list[manifests.Applied]] = {}
    for item in objects:
        by_kind.setdefault(item.kind, []).append(item)
    assert {i.name for i in by_kind["ConfigMap"]} == {"cm-mapper", "mosquitto-config"}
    assert [i.name for i in by_kind["Secret"]] == ["mysecret"]
    secret = by_kind["Secret"][0].obj
    assert "data" not in secret and secret["stringData"] == {"password": "YOUR_PASSWORD"}
    workloads = by_kind["Deployment"] + by_kind["EdgePlacement"]
    assert {i.name for i in workloads} == {"counter-mapper", "mapper-test", "mosquitto"}
    for item in workloads:
        template = item.obj["spec"]["template"]["spec"]
        assert "nodeName" not in template
        assert template["nodeSelector"]["node-role.kubernetes.io/edge"] == ""
        for container in template["containers"]:
            assert container["image"] == "localhost/busybox:latest"
            assert container["command"] == ["/bin/sh", "-c"]
        assert not any("hostPath" in v for v in template.get("volumes") or [])
        assert any(c.startswith("image ") for c in item.changes)
    assert by_kind["EdgePlacement"][0].obj["spec"]["mode"] == "PerNode"
    # Devices: parsed by the same rules the hub and the agent apply, bound to demo nodes.
    devices = [parse_document(i.obj) for i in by_kind["Device"]]
    models = [parse_document(i.obj) for i in by_kind["DeviceModel"]]
    assert all(isinstance(d, Device) for d in devices)
    assert all(isinstance(m, DeviceModel) for m in models)
    placed = {i.name: i.obj["spec"]["nodeName"] for i in by_kind["Device"]}
    assert placed["counter-instance"] == "edge-1"
    assert placed["vled-instance-01"] == "edge-3"  # the node the outage cuts off
    for node in nodes:
        assert placed[f"thermostat-{node}"] == node
        assert placed[f"{node}-cpu-thermal"] == node
    assert {m.name for m in models} == {
        "counter-model",
        "vled-01",
        "thermostat",
        "linux-thermal-zone",
    }


def test_crds_cover_what_the_demo_creates() -> None:
    kinds = {doc["spec"]["names"]["kind"] for doc in manifests.crd_documents()}
    assert kinds == {"Device", "DeviceModel", "EdgePlacement"}
