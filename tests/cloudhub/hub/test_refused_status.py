"""A status write the API refuses for good shows on the object and in a metric (issue 15
item 12), on both APIs; the next report of the same pod is still written."""

from __future__ import annotations

import time

import pytest

from cloudhub.kube import EVENTS, PODS, KubeClient
from protocol.errors import ErrorCode
from protocol.messages import PodStatus
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually, pod
from tests.sim import running_status


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_refused_pod_status_is_a_warning_event_and_a_metric(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    hub = await hubs.start()
    node = unique("edge-bad-ip")
    agent = hubs.agent(node, auto_status=False)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    created = await kube.create(PODS, pod("web", namespace, node))
    uid = created["metadata"]["uid"]
    await agent.wait_for(lambda: uid in agent.store, DEADLINE)
    ref, _, held = agent.store[uid]
    # An agent on a host whose address it cannot read reports garbage: both APIs answer 422.
    agent.send(PodStatus(ref, running_status(held, "not-an-ip", time.time()), time.time()))
    await agent.wait_for(
        lambda: any(e.code is ErrorCode.INVALID_MESSAGE for e in agent.errors), DEADLINE
    )
    (error,) = agent.errors
    assert "the API refused the status" in error.message and "not-an-ip" in error.message

    async def warned() -> list[dict]:
        items, _ = await kube.list(
            EVENTS, namespace, field_selector="involvedObject.kind=Pod,involvedObject.name=web"
        )
        return [e for e in items if e["reason"] == "FailedStatusUpdate"]

    await eventually(warned, "a FailedStatusUpdate Event on the pod")
    (event,) = await warned()
    assert event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == uid
    assert f"reported by node {node}" in event["message"]
    assert "422" in event["message"] and "status.podIPs[0]" in event["message"]
    refused = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_status_writes_refused_total", {"resource": "pods", "reason": "Invalid"}
    )
    assert refused == 1.0
    # Refused, but acknowledged: the edge does not resend it, and the next report goes in.
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    agent.send(PodStatus(ref, running_status(held, "10.0.0.7", time.time()), time.time()))

    async def written() -> bool:
        got = await kube.get(PODS, "web", namespace)
        return (got.get("status") or {}).get("podIP") == "10.0.0.7"

    await eventually(written, "the next, valid status written")


async def test_a_refused_device_status_is_a_warning_event_and_a_metric(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    # A cluster whose Device CRD is stricter than ours (an operator's own schema): the
    # report is valid for the model, the API refuses the status with 422.
    from cloudhub.devices.extension import devices_extension
    from cloudhub.devices.settings import DevicesSettings
    from cloudhub.kube import CRDS, DEVICEMODELS, DEVICES
    from protocol.messages import TwinReported
    from tests.twins.kubeedge import (
        COUNTER_DEVICE,
        COUNTER_MODEL,
        device,
        install_device_crds,
        model,
    )

    await install_device_crds(kube)
    crd = await kube.get(CRDS, "devices.devices.kubeedge.io")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    reported = schema["properties"]["status"]["properties"]["twins"]["items"]["properties"]
    reported["reported"]["properties"]["value"]["maxLength"] = 2
    await kube.replace(CRDS, crd)
    node = unique("edge-strict")
    await kube.create(DEVICEMODELS, model(COUNTER_MODEL, namespace))
    made = await kube.create(DEVICES, device(COUNTER_DEVICE, namespace, node))
    uid = made["metadata"]["uid"]
    hub = await hubs.start(extensions=[devices_extension(DevicesSettings())])
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced and uid in agent.store, DEADLINE)
    ref = agent.store[uid][0]
    agent.send(TwinReported(ref, "count", "12345", 1, time.time()))
    await agent.wait_for(
        lambda: any(e.code is ErrorCode.INVALID_MESSAGE for e in agent.errors), DEADLINE
    )
    assert "the API refused the Device" in agent.errors[-1].message

    items, _ = await kube.list(DEVICES, namespace)
    name = items[0]["metadata"]["name"]

    async def warned_device() -> list[dict]:
        events, _ = await kube.list(
            EVENTS,
            namespace,
            field_selector=f"involvedObject.kind=Device,involvedObject.name={name}",
        )
        return [e for e in events if e["reason"] == "FailedStatusUpdate"]

    await eventually(warned_device, "a FailedStatusUpdate Event on the Device")
    (event,) = await warned_device()
    assert event["type"] == "Warning" and event["involvedObject"]["uid"] == uid
    assert f"reported by node {node}" in event["message"] and "422" in event["message"]
    refused = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_status_writes_refused_total", {"resource": "devices", "reason": "Invalid"}
    )
    assert refused == 1.0
