"""What ``cloudhub demo`` applies: real manifests, and what it changes in them to run here.

The files in ``cloudhub/demo/data/`` are byte-for-byte copies of upstream files from the
shared manifests corpus (``tests/data/manifests``, see its ``PROVENANCE.md``; a test checks
the copies), plus our own device examples and CRDs (``deploy/``). :data:`SOURCES` names the
origin of each.

To run them on a machine with no registry and no upstream images, :func:`demo_objects`
changes, and says it changes (:class:`Applied.changes`):

- every container image → the locally built busybox image, and its command → a shell that
  sleeps until stopped (the upstream programs are not in busybox);
- ``hostPath`` volumes → ``emptyDir`` (the host directories upstream expects are absent);
- a template's ``nodeName`` (``kind-worker`` and the like) → the edge ``nodeSelector``, so
  that the placement controller chooses the node;
- Devices' ``nodeName`` → a demo node; the thermostat and thermal-zone Device get one copy
  per node;
- the onvif ``secret.yaml`` (``data.password`` is a placeholder, not base64: the API refuses
  the file, as upstream ships it) → the same value as ``stringData``;
- Services are not applied (edge nodes run no service proxy in the demo).
"""

from __future__ import annotations

import copy
import pathlib
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = [
    "DATA",
    "EDGE_SELECTOR",
    "SOURCES",
    "Applied",
    "crd_documents",
    "demo_objects",
    "load",
]

DATA = pathlib.Path(__file__).resolve().parent / "data"
"""Where the shipped copies live."""

SOURCES: dict[str, str] = {
    "kubeedge-counter-configmap.yaml": (
        "kubeedge/examples/new-counter-demo/virtualprotocol/resource/configmap.yaml"
    ),
    "kubeedge-counter-deployment.yaml": (
        "kubeedge/examples/new-counter-demo/virtualprotocol/resource/deployment.yaml"
    ),
    "kubeedge-mqtt.yaml": "kubeedge/examples/temperature-sensor-demo/modbus/resource/mqtt.yaml",
    "kubeedge-onvif-deployment.yaml": (
        "kubeedge/mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/deployment.yaml"
    ),
    "kubeedge-onvif-secret.yaml": (
        "kubeedge/mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/secret.yaml"
    ),
    "kubeedge-counter-model.yaml": "kubeedge/examples/new-counter-demo/crds/counter-model.yaml",
    "kubeedge-counter-instance.yaml": (
        "kubeedge/examples/new-counter-demo/crds/counter-instance.yaml"
    ),
    "kubeedge-vled-model.yaml": (
        "kubeedge/examples/sound-equipment-fault-detection/vled/resource/vled-model.yaml"
    ),
    "kubeedge-vled-instance.yaml": (
        "kubeedge/examples/sound-equipment-fault-detection/vled/resource/vled-instance.yaml"
    ),
}
"""Corpus copies: file in ``data/`` → path below ``shared/data/manifests``."""

OWN_FILES: dict[str, str] = {
    "edgefleet-thermostat.yaml": "deploy/examples/devices/thermostat.yaml",
    "edgefleet-thermal-zone.yaml": "deploy/examples/devices/thermal-zone.yaml",
    "devices.kubeedge.io_devicemodels.yaml": "deploy/crds/devices.kubeedge.io_devicemodels.yaml",
    "devices.kubeedge.io_devices.yaml": "deploy/crds/devices.kubeedge.io_devices.yaml",
    "edgeplacements.apps.edgefleet.io.yaml": "deploy/crds/edgeplacements.apps.edgefleet.io.yaml",
}
"""Copies of our own files: file in ``data/`` → path in this repository."""

EDGE_SELECTOR = {"node-role.kubernetes.io/edge": ""}

#: The container command of every demo pod: sleep until SIGTERM, then exit at once.
IDLE_SCRIPT = "trap 'kill $! 2>/dev/null; exit 0' TERM; while true; do sleep 3600 & wait $!; done"


def load(name: str) -> list[dict[str, Any]]:
    """The YAML documents of a shipped file (empty documents skipped)."""
    text = (DATA / name).read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def crd_documents() -> list[dict[str, Any]]:
    """The CRDs the demo needs: KubeEdge DeviceModel and Device, EdgePlacement."""
    names = (
        "devices.kubeedge.io_devicemodels.yaml",
        "devices.kubeedge.io_devices.yaml",
        "edgeplacements.apps.edgefleet.io.yaml",
    )
    return [doc for name in names for doc in load(name)]


@dataclass
class Applied:
    """One object the demo creates, where it comes from and what it changed.

    Attributes:
        obj: the object to create.
        source: the shipped file it comes from.
        changes: what the demo changed, one short phrase each.
    """

    obj: dict[str, Any]
    source: str
    changes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


def _runnable_template(template: dict[str, Any], image: str, changes: list[str]) -> dict:
    spec = template.setdefault("spec", {})
    if spec.pop("nodeName", None) is not None:
        changes.append("template nodeName → edge nodeSelector")
    selector = spec.setdefault("nodeSelector", {})
    selector.update(EDGE_SELECTOR)
    for container in spec.get("containers") or []:
        changes.append(f"image {container.get('image')} → {image}")
        container["image"] = image
        container["imagePullPolicy"] = "IfNotPresent"
        container["command"] = ["/bin/sh", "-c"]
        container["args"] = [IDLE_SCRIPT]
        container.pop("ports", None)
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            changes.append(f"hostPath {volume['hostPath'].get('path')} → emptyDir")
            del volume["hostPath"]
            volume["emptyDir"] = {}
    spec["terminationGracePeriodSeconds"] = 5
    return template


def _deployment(doc: dict, source: str, image: str) -> Applied:
    obj = copy.deepcopy(doc)
    obj.setdefault("metadata", {})["namespace"] = "default"
    changes: list[str] = []
    _runnable_template(obj["spec"]["template"], image, changes)
    return Applied(obj, source, changes)


def _placement_from(doc: dict, source: str, image: str) -> Applied:
    """An EdgePlacement (one pod per edge node) from a Deployment's pod template."""
    changes: list[str] = ["Deployment → EdgePlacement, mode PerNode (one pod on every node)"]
    template = _runnable_template(copy.deepcopy(doc["spec"]["template"]), image, changes)
    obj = {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgePlacement",
        "metadata": {"name": doc["metadata"]["name"], "namespace": "default"},
        "spec": {
            "template": template,
            "nodeSelector": {"matchLabels": dict(EDGE_SELECTOR)},
            "mode": "PerNode",
        },
    }
    return Applied(obj, source, changes)


def _device(doc: dict, source: str, node: str, name: str | None = None) -> Applied:
    obj = copy.deepcopy(doc)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    changes = []
    if name and name != meta.get("name"):
        changes.append(f"name {meta.get('name')} → {name}")
        meta["name"] = name
    if obj.get("kind") == "Device":
        old = obj["spec"].get("nodeName")
        obj["spec"]["nodeName"] = node
        if old != node:
            changes.append(f"nodeName {old} → {node}")
        obj.pop("status", None)
    return Applied(obj, source, changes)


def demo_objects(nodes: list[str], image: str) -> list[Applied]:
    """Everything the demo creates, in order: configuration, workloads, devices.

    Args:
        nodes: the demo's node names (at least one); the corpus devices go to the first
            and to the last of them, our thermostat and thermal zone to every node.
        image: the container image every workload runs.
    """
    out: list[Applied] = []
    for doc in load("kubeedge-counter-configmap.yaml"):
        obj = copy.deepcopy(doc)
        obj["metadata"]["namespace"] = "default"
        out.append(Applied(obj, "kubeedge-counter-configmap.yaml"))
    mqtt = load("kubeedge-mqtt.yaml")
    for doc in mqtt:
        if doc.get("kind") == "ConfigMap":
            obj = copy.deepcopy(doc)
            obj["metadata"]["namespace"] = "default"
            out.append(Applied(obj, "kubeedge-mqtt.yaml"))
    for doc in load("kubeedge-onvif-secret.yaml"):
        obj = copy.deepcopy(doc)
        obj["metadata"]["namespace"] = "default"
        data = obj.pop("data", {}) or {}
        obj["stringData"] = {k: str(v) for k, v in data.items()}
        out.append(
            Applied(obj, "kubeedge-onvif-secret.yaml", ["data (not base64 upstream) → stringData"])
        )
    for name in ("kubeedge-counter-deployment.yaml", "kubeedge-onvif-deployment.yaml"):
        for doc in load(name):
            if doc.get("kind") == "Deployment":
                out.append(_deployment(doc, name, image))
    for doc in mqtt:
        if doc.get("kind") == "Deployment":
            out.append(_placement_from(doc, "kubeedge-mqtt.yaml", image))
    first, last = nodes[0], nodes[-1]
    for name, node in (
        ("kubeedge-counter-model.yaml", first),
        ("kubeedge-counter-instance.yaml", first),
        ("kubeedge-vled-model.yaml", last),
        ("kubeedge-vled-instance.yaml", last),
    ):
        out.extend(_device(doc, name, node) for doc in load(name))
    for name, device_name in (
        ("edgefleet-thermostat.yaml", "thermostat-{node}"),
        ("edgefleet-thermal-zone.yaml", "{node}-cpu-thermal"),
    ):
        docs = load(name)
        out.extend(_device(doc, name, first) for doc in docs if doc["kind"] == "DeviceModel")
        for node in nodes:
            out.extend(
                _device(doc, name, node, device_name.format(node=node))
                for doc in docs
                if doc["kind"] == "Device"
            )
    return out
