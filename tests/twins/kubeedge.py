"""Device twin test material: the device CRDs installed, KubeEdge's own example manifests
(tests/data, byte for byte from the shared corpus) made into objects for one node, and
reads of the Device status.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import yaml

from cloudhub.errors import KubeConflict, KubeNotFound
from cloudhub.kube import CRDS, DEVICEMODELS, DEVICES, KubeClient
from tests.data import MANIFESTS
from tests.waiting import eventually

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = MANIFESTS / "kubeedge" / "examples"

#: KubeEdge's virtual LED: model ``vled-01`` (``status``: INT, ReadWrite) and its device.
VLED_MODEL = EXAMPLES / "sound-equipment-fault-detection/vled/resource/vled-model.yaml"
VLED_DEVICE = EXAMPLES / "sound-equipment-fault-detection/vled/resource/vled-instance.yaml"
#: KubeEdge's counter: model ``counter-model`` (``status``, ``count``: STRING, ReadWrite).
COUNTER_MODEL = EXAMPLES / "new-counter-demo/crds/counter-model.yaml"
COUNTER_DEVICE = EXAMPLES / "new-counter-demo/crds/counter-instance.yaml"


async def install_device_crds(kube: KubeClient, timeout: float = 30.0) -> None:
    """Create the Device and DeviceModel CRDs of deploy/crds (if absent) and wait until
    both resources are served (what a cluster operator does with ``kubectl apply``)."""
    for path in sorted((REPO / "deploy" / "crds").glob("devices.kubeedge.io_*.yaml")):
        try:
            await kube.create(CRDS, yaml.safe_load(path.read_text()))
        except KubeConflict:
            pass

    async def served() -> bool:
        try:
            await kube.list(DEVICES, limit=1)
            await kube.list(DEVICEMODELS, limit=1)
        except KubeNotFound:
            return False
        return True

    await eventually(served, "the Device and DeviceModel resources served", timeout)


def load(path: pathlib.Path) -> dict:
    """The one document of a KubeEdge example file."""
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return doc


def model(path: pathlib.Path, namespace: str) -> dict:
    """A KubeEdge example DeviceModel, in ``namespace``."""
    doc = copy.deepcopy(load(path))
    doc["metadata"]["namespace"] = namespace
    return doc


def device(
    path: pathlib.Path,
    namespace: str,
    node: str,
    *,
    name: str | None = None,
    desired: dict[str, str] | None = None,
) -> dict:
    """A KubeEdge example Device on ``node`` in ``namespace`` (its example status left out:
    status is the hub's to write), with ``desired`` values (text, as in KubeEdge)."""
    doc = copy.deepcopy(load(path))
    doc.pop("status", None)
    doc["metadata"]["namespace"] = namespace
    if name is not None:
        doc["metadata"]["name"] = name
    doc["spec"]["nodeName"] = node
    set_desired(doc, desired or {})
    return doc


def set_desired(doc: dict, desired: dict[str, str]) -> dict:
    """Set ``spec.properties[].desired.value`` of the named properties (in place)."""
    for prop in doc["spec"]["properties"]:
        if prop["name"] in desired:
            prop["desired"] = {"value": desired[prop["name"]]}
    return doc


def twin(obj: dict, prop: str) -> dict[str, Any]:
    """``status.twins[]`` entry of ``prop`` (empty if absent)."""
    for entry in (obj.get("status") or {}).get("twins") or []:
        if entry.get("propertyName") == prop:
            return entry
    return {}


def reported_value(obj: dict, prop: str) -> str | None:
    """``status.twins[prop].reported.value``, or ``None``."""
    return (twin(obj, prop).get("reported") or {}).get("value")


async def update_desired(
    kube: KubeClient, namespace: str, name: str, desired: dict[str, str]
) -> dict:
    """Change desired values as a user would (read, edit, replace; again on 409)."""
    while True:
        obj = await kube.get(DEVICES, name, namespace)
        set_desired(obj, desired)
        try:
            return await kube.replace(DEVICES, obj)
        except KubeConflict:
            continue
