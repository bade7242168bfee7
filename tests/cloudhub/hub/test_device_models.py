"""Desired values follow the DeviceModel, whenever it comes (issue 15 item 7), on both APIs.

Applying a directory alphabetically creates a Device before its DeviceModel. The desired
state is level-based: when the model appears, or changes later, the node gets the desired
state the spec and the model now give; until the model exists the Device's status says it
waits for it (condition ``ModelAvailable=False``, reason ``ModelNotFound``).
"""

from __future__ import annotations

import pytest

from cloudhub.devices.extension import devices_extension
from cloudhub.devices.settings import DevicesSettings
from cloudhub.kube import DEVICEMODELS, DEVICES, KubeClient
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually
from tests.twins.kubeedge import VLED_DEVICE, VLED_MODEL, device, install_device_crds, model, twin


def condition(obj: dict, type_: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return {}


async def set_maximum(kube: KubeClient, namespace: str, maximum: str | None) -> None:
    obj = await kube.get(DEVICEMODELS, "vled-01", namespace)
    prop = obj["spec"]["properties"][0]
    if maximum is None:
        prop.pop("maximum", None)
    else:
        prop["maximum"] = maximum
    await kube.replace(DEVICEMODELS, obj)


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_device_created_before_its_model_gets_its_desired_values_when_it_comes(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await install_device_crds(kube)
    node = unique("edge-early")
    # The Device first, as `kubectl apply -f dir/` does when the Device sorts first.
    vled = await kube.create(DEVICES, device(VLED_DEVICE, namespace, node, desired={"status": "5"}))
    uid = vled["metadata"]["uid"]
    await hubs.start(extensions=[devices_extension(DevicesSettings())])
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced and uid in agent.store, DEADLINE)

    async def waiting() -> bool:
        obj = await kube.get(DEVICES, "vled-instance-01", namespace)
        c = condition(obj, "ModelAvailable")
        return c.get("status") == "False" and c.get("reason") == "ModelNotFound"

    await eventually(waiting, "the Device's status to say it waits for its model")
    obj = await kube.get(DEVICES, "vled-instance-01", namespace)
    waits = condition(obj, "ModelAvailable")
    assert f"DeviceModel {namespace}/vled-01" in waits["message"]
    assert "desired values are sent once it exists" in waits["message"]
    assert twin(obj, "status")["rejectedDesired"]["reason"] == "ModelNotFound"
    assert not (agent.desired.get(uid) and agent.desired[uid].properties)  # nothing to apply

    # The model comes: the desired value reaches the node, the status says so.
    await kube.create(DEVICEMODELS, model(VLED_MODEL, namespace))
    await agent.wait_for(
        lambda: uid in agent.desired and agent.desired[uid].properties == {"status": 5}, DEADLINE
    )
    first = agent.desired[uid].version

    async def available() -> bool:
        obj = await kube.get(DEVICES, "vled-instance-01", namespace)
        return condition(obj, "ModelAvailable").get("status") == "True" and not twin(
            obj, "status"
        ).get("rejectedDesired")

    await eventually(available, "ModelAvailable=True and no rejection")

    # The model changes later: a maximum below the value rejects it, a higher one lets it
    # through again; each time the node gets the state the model now gives, newer.
    await set_maximum(kube, namespace, "1")
    await agent.wait_for(lambda: agent.desired[uid].properties == {}, DEADLINE)
    second = agent.desired[uid].version
    assert second > first

    async def rejected() -> bool:
        obj = await kube.get(DEVICES, "vled-instance-01", namespace)
        return twin(obj, "status").get("rejectedDesired", {}).get("reason") == "OutOfRange"

    await eventually(rejected, "the value rejected by the new maximum")
    await set_maximum(kube, namespace, "10")
    await agent.wait_for(lambda: agent.desired[uid].properties == {"status": 5}, DEADLINE)
    assert agent.desired[uid].version > second

    # The model deleted: the Device waits for it again.
    await kube.delete(DEVICEMODELS, "vled-01", namespace)
    await eventually(waiting, "the Device waiting for its model again")
