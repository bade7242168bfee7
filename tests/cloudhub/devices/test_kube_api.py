"""Our device CRDs installed in the embedded API; real KubeEdge v1beta1 manifests applied
through kubernetes_asyncio; the hub's twin rules write a status the API accepts.

Talks to the API only through kubernetes_asyncio (as the hub will).
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from cloudhub.devices import (
    evaluate_desired,
    load_file,
    merge_reported,
    parse_device,
    parse_device_model,
    status_with_rejections,
)
from cloudhub.devices.twin import desired_version
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from protocol.devices import ReportedValue
from tests.crds import crd_documents
from tests.waiting import eventually

from .test_shared_manifests import PAIRS

REPO = pathlib.Path(__file__).resolve().parents[3]
GROUP, VERSION = "devices.kubeedge.io", "v1beta1"
MERGE = "application/merge-patch+json"
DEADLINE_S = 20.0


@pytest.fixture
async def kube() -> AsyncIterator[client.ApiClient]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as api:
        cfg = client.Configuration()
        await config.load_kube_config(
            config_file=str(api.kubeconfig_path), client_configuration=cfg
        )
        async with client.ApiClient(cfg) as api_client:
            yield api_client


async def install_crds(api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    for crd in crd_documents():
        await ext.create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api_client)

    async def served() -> bool:
        try:
            await custom.list_namespaced_custom_object(GROUP, VERSION, "default", "devices")
            await custom.list_namespaced_custom_object(GROUP, VERSION, "default", "devicemodels")
        except ApiException:
            return False
        return True

    await eventually(served, "both resources served", DEADLINE_S)


async def create(custom: client.CustomObjectsApi, doc: dict[str, Any]) -> dict[str, Any]:
    plural = "devices" if doc["kind"] == "Device" else "devicemodels"
    namespace = doc["metadata"].get("namespace", "default")
    return await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, doc)


async def test_real_manifests_apply_and_twin_status_round_trips(
    kube: client.ApiClient, kubeedge_dir: pathlib.Path
) -> None:
    await install_crds(kube)
    custom = client.CustomObjectsApi(kube)
    for device_rel, model_rel in PAIRS:
        (model_doc,) = load_file(kubeedge_dir / model_rel)
        (device_doc,) = load_file(kubeedge_dir / device_rel)
        model_obj = await create(custom, model_doc.content)
        device_obj = await create(custom, device_doc.content)
        assert device_obj["metadata"]["generation"] == 1 and device_obj["metadata"]["uid"]
        assert "status" not in device_obj  # status is the hub's, through the subresource
        # what the hub reads back parses, and fits the model
        model = parse_device_model(model_obj)
        device = parse_device(device_obj)
        assert device.uid == device_obj["metadata"]["uid"] and device.generation == 1
        assert evaluate_desired(device, model).rejections == ()
        assert device_obj["spec"] == device_doc.content["spec"]  # nothing pruned


async def test_desired_versions_rejections_and_identity_through_the_api(
    kube: client.ApiClient,
) -> None:
    await install_crds(kube)
    custom = client.CustomObjectsApi(kube)
    model_doc, device_doc = (
        d.content for d in load_file(REPO / "deploy/examples/devices/thermostat.yaml")
    )
    model = parse_device_model(await create(custom, model_doc))
    made = await create(custom, device_doc)
    args = (GROUP, VERSION, "default", "devices", "thermostat-1")

    # a desired value out of range: accepted by the API (it cannot know the model) ...
    patch = {"spec": {"properties": [{"name": "setpoint", "desired": {"value": "99"}}]}}
    changed = await custom.patch_namespaced_custom_object(*args, patch, _content_type=MERGE)
    assert changed["metadata"]["generation"] == 2  # a spec change: a new desired version
    device = parse_device(changed)
    evaluation = evaluate_desired(device, model)
    assert evaluation.state.version == desired_version(2, 0)
    assert evaluation.state.properties == {}
    # ... and shown as rejected in the status by the hub
    merge = status_with_rejections(device, evaluation)
    written = await custom.replace_namespaced_custom_object_status(
        *args, {**changed, "status": merge.status}
    )
    assert written["status"]["twins"][0]["rejectedDesired"]["reason"] == "OutOfRange"
    assert written["metadata"]["generation"] == 2  # status writes are not desired versions
    report = ReportedValue("default", "thermostat-1", device.uid, "temperature", 19.5, 7, 1.0)
    merged = merge_reported(parse_device(written), model, [report])
    written = await custom.replace_namespaced_custom_object_status(
        *args, {**written, "status": merged.status}
    )
    (twin_rejected, twin_reported) = written["status"]["twins"]
    assert twin_rejected["propertyName"] == "setpoint"
    assert twin_reported["reported"]["value"] == "19.5"

    # the API refuses what our CRD schema refuses
    bad = {**device_doc, "metadata": {"name": "bad", "namespace": "default"}}
    bad["spec"] = {**bad["spec"], "properties": [{"name": "setpoint", "desired": {"value": 21}}]}
    with pytest.raises(ApiException) as err:
        await create(custom, bad)
    assert err.value.status == 422

    # delete and recreate under the same name: a new device
    await custom.delete_namespaced_custom_object(*args)
    again = await create(custom, device_doc)
    assert again["metadata"]["uid"] != made["metadata"]["uid"]
    assert again["metadata"]["generation"] == 1
    stale = merge_reported(parse_device(again), model, [report])
    assert not stale.changed and stale.stale == (report,)
