"""Device twins end to end with real processes: the embedded API, the hub with its twins
extension, ``python -m edgeagent run`` agents, and this test as the mapper on the agent's
local device API (its Unix socket, through the mapper SDK). Devices and models are
KubeEdge's own examples (tests/data, from the shared corpus)."""

from __future__ import annotations

import asyncio

import pytest

from cloudhub.devices.twin import desired_version, model_revision
from cloudhub.kube import DEVICEMODELS, DEVICES, KubeClient
from edgeagent.mappers import APIUnavailable, DeviceAPIError, DeviceClient
from edgeagent.mappers.sdk import Desired
from tests.edgeagent.hublink.fleet import eventually, unique
from tests.twins.conftest import TwinFleet
from tests.twins.kubeedge import (
    COUNTER_DEVICE,
    COUNTER_MODEL,
    VLED_DEVICE,
    VLED_MODEL,
    device,
    model,
    reported_value,
    update_desired,
)

VLED = "vled-instance-01"
COUNTER = "counter-instance"
TIMEOUT = 60.0  # seconds: agent processes start slowly on a loaded 2-core machine


async def _desired_at(mapper: DeviceClient, namespace: str, name: str, version: int):
    """The mapper's view of the desired state once it is at least ``version``."""
    try:
        desired = await mapper.get_desired(namespace, name)
    except (APIUnavailable, DeviceAPIError):  # agent starting, device not there yet
        return None
    return desired if desired.version >= version else None


async def _reported(kube: KubeClient, namespace: str, name: str, prop: str, value: str) -> bool:
    obj = await kube.get(DEVICES, name, namespace)
    return reported_value(obj, prop) == value


async def _two_devices(kube: KubeClient, namespace: str, node: str) -> tuple[dict, dict]:
    await kube.create(DEVICEMODELS, model(VLED_MODEL, namespace))
    await kube.create(DEVICEMODELS, model(COUNTER_MODEL, namespace))
    vled = await kube.create(DEVICES, device(VLED_DEVICE, namespace, node, desired={"status": "1"}))
    counter = await kube.create(
        DEVICES, device(COUNTER_DEVICE, namespace, node, desired={"status": "ON"})
    )
    return vled, counter


async def test_desired_reaches_the_mapper_and_reports_reach_the_status(
    fleet: TwinFleet, kube: KubeClient, namespace: str
) -> None:
    node = unique("edge-twin")
    vled, _ = await _two_devices(kube, namespace, node)
    mapper = fleet.mapper(fleet.agent(node))
    first: Desired = await eventually(
        lambda: _desired_at(mapper, namespace, VLED, 1), "the desired state at the mapper", TIMEOUT
    )
    assert first.uid == vled["metadata"]["uid"]
    assert first.properties == {"status": 1}  # typed per the model (INT)
    counter = await eventually(
        lambda: _desired_at(mapper, namespace, COUNTER, 1), "the counter's desired", TIMEOUT
    )
    assert counter.properties == {"status": "ON"}

    # a change in the API wakes the mapper's long-poll (a newer version: the generation
    # grew, the model's resourceVersion is the same)
    poll = asyncio.create_task(mapper.wait_desired(namespace, VLED, after=first, wait=TIMEOUT))
    await update_desired(kube, namespace, VLED, {"status": "0"})
    changed = await asyncio.wait_for(poll, TIMEOUT)
    revision = model_revision(await kube.get(DEVICEMODELS, "vled-01", namespace))
    assert first.version == desired_version(1, revision)
    assert (changed.version, changed.properties) == (desired_version(2, revision), {"status": 0})

    # reports reach the Device status
    await mapper.report(namespace, VLED, {"status": 1})
    await mapper.report(namespace, COUNTER, {"count": "42"})
    await eventually(lambda: _reported(kube, namespace, VLED, "status", "1"), "vled", TIMEOUT)
    await eventually(lambda: _reported(kube, namespace, COUNTER, "count", "42"), "count", TIMEOUT)

    # a value the model refuses: a clear error to the mapper, nothing of it kept or sent;
    # the next good report goes through
    with pytest.raises(DeviceAPIError) as refused:
        await mapper.report(namespace, VLED, {"status": "bright"})
    assert refused.value.status == 422 and refused.value.reason == "TypeMismatch"
    assert refused.value.property == "status"
    await mapper.report(namespace, VLED, {"status": 0})
    await eventually(lambda: _reported(kube, namespace, VLED, "status", "0"), "vled 0", TIMEOUT)
    device_view = await mapper.get_device(namespace, VLED)
    assert device_view.name == VLED


async def test_hub_down_reports_are_kept_and_delivered_after_reconnect(
    fleet: TwinFleet, kube: KubeClient, namespace: str
) -> None:
    node = unique("edge-twin")
    await _two_devices(kube, namespace, node)
    mapper = fleet.mapper(fleet.agent(node))
    await eventually(lambda: _desired_at(mapper, namespace, VLED, 1), "desired", TIMEOUT)
    await mapper.report(namespace, VLED, {"status": 3})
    await eventually(lambda: _reported(kube, namespace, VLED, "status", "3"), "online", TIMEOUT)

    await fleet.hub.stop()
    # accepted while the hub is away (answered once committed in the agent's store)
    await mapper.report(namespace, VLED, {"status": 5})
    await mapper.report(namespace, VLED, {"status": 7})  # latest wins
    await mapper.report(namespace, COUNTER, {"count": "9", "status": "PAUSED"})
    assert await _reported(kube, namespace, VLED, "status", "3")  # nobody wrote meanwhile

    await fleet.hub.start()
    await eventually(lambda: _reported(kube, namespace, VLED, "status", "7"), "vled", TIMEOUT)
    await eventually(lambda: _reported(kube, namespace, COUNTER, "count", "9"), "count", TIMEOUT)
    assert await _reported(kube, namespace, COUNTER, "status", "PAUSED")


async def test_agent_down_desired_changes_arrive_at_reconnect(
    fleet: TwinFleet, kube: KubeClient, namespace: str
) -> None:
    node = unique("edge-twin")
    await _two_devices(kube, namespace, node)
    agent = fleet.agent(node)
    mapper = fleet.mapper(agent)
    await eventually(lambda: _desired_at(mapper, namespace, VLED, 1), "desired", TIMEOUT)
    await eventually(lambda: _desired_at(mapper, namespace, COUNTER, 1), "counter", TIMEOUT)

    agent.kill()  # SIGKILL, as a power cut
    for value in ("0", "1", "0"):  # the cloud wins: only the last one matters
        await update_desired(kube, namespace, VLED, {"status": value})
    await kube.delete(DEVICES, COUNTER, namespace)
    agent.start()

    revision = model_revision(await kube.get(DEVICEMODELS, "vled-01", namespace))
    latest: Desired = await eventually(
        lambda: _desired_at(mapper, namespace, VLED, desired_version(4, revision)),
        "the newest desired state",
        TIMEOUT,
    )
    assert latest.properties == {"status": 0}

    async def counter_gone() -> bool:
        return [d.name for d in await mapper.list_devices()] == [VLED]

    await eventually(counter_gone, "the deleted counter gone from the node", TIMEOUT)
