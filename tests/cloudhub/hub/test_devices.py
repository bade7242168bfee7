"""The hub's device-twins extension with simulated agents on the embedded API: Devices and
their models reach their node only, desired state follows the spec, reports reach the
Device status and are acknowledged once written, bad reports are refused with a clear
error and lose nothing else."""

from __future__ import annotations

import time

from cloudhub.devices.extension import devices_extension
from cloudhub.devices.settings import DevicesSettings
from cloudhub.devices.twin import desired_version, model_revision
from cloudhub.kube import DEVICEMODELS, DEVICES, KubeClient
from protocol.errors import ErrorCode
from protocol.messages import ObjectRef, TwinReported
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, eventually
from tests.twins.kubeedge import (
    COUNTER_DEVICE,
    COUNTER_MODEL,
    VLED_DEVICE,
    VLED_MODEL,
    device,
    install_device_crds,
    model,
    reported_value,
    twin,
    update_desired,
)


def _report(ref: ObjectRef, prop: str, value, version: int, **kwargs) -> TwinReported:
    return TwinReported(
        ref=ref,
        property=prop,
        value=value,
        version=version,
        timestamp=kwargs.get("timestamp", time.time()),
    )


async def test_devices_desired_and_reported_through_the_hub(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await install_device_crds(kube)
    node, other = unique("edge-dev"), unique("edge-other")
    await kube.create(DEVICEMODELS, model(VLED_MODEL, namespace))
    await kube.create(DEVICEMODELS, model(COUNTER_MODEL, namespace))
    vled = await kube.create(DEVICES, device(VLED_DEVICE, namespace, node, desired={"status": "1"}))
    await kube.create(DEVICES, device(COUNTER_DEVICE, namespace, other))
    hub = await hubs.start(extensions=[devices_extension(DevicesSettings())])
    uid = vled["metadata"]["uid"]
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced and uid in agent.desired, DEADLINE)

    # its Device and that Device's model, nothing of the other node's
    assert {(ref.kind, ref.name) for ref, _, _ in agent.store.values()} == {
        ("DeviceModel", "vled-01"),
        ("Device", "vled-instance-01"),
    }
    # the full desired state, typed per the model, its version from the generation and the
    # model's resourceVersion, after the upsert
    # (SimAgent keeps a twin_desired only for a Device it already holds, as the edge does)
    assert agent.desired[uid].properties == {"status": 1}
    revision = model_revision(await kube.get(DEVICEMODELS, "vled-01", namespace))
    assert agent.desired[uid].version == desired_version(vled["metadata"]["generation"], revision)

    # a spec change: the new desired state
    await update_desired(kube, namespace, "vled-instance-01", {"status": "0"})
    await agent.wait_for(
        lambda: agent.desired[uid].version == desired_version(2, revision), DEADLINE
    )
    assert agent.desired[uid].properties == {"status": 0}

    # a report reaches the status, and is acknowledged once written
    ref = next(r for r, _, _ in agent.store.values() if r.uid == uid)
    upserts_before = sum(n for (u, _), n in agent.upserts.items() if u == uid)
    agent.send(_report(ref, "status", 1, 10))
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    obj = await kube.get(DEVICES, "vled-instance-01", namespace)
    assert reported_value(obj, "status") == "1"
    assert twin(obj, "status")["reported"]["metadata"]["version"] == "10"

    # bad reports: each refused with a clear error and acknowledged (never resent); the
    # good one sent among them is still written; the session goes on
    other_dev = await kube.get(DEVICES, "counter-instance", namespace)
    other_ref = ObjectRef("Device", namespace, "counter-instance", other_dev["metadata"]["uid"])
    errors_before = len(agent.errors)
    bad = [
        _report(ref, "status", "not a number", 11),
        _report(ref, "brightness", 3, 12),
        _report(ref, "status", 1, 13, timestamp=-5.0),
        _report(ObjectRef("DeviceModel", namespace, "vled-01", ref.uid), "status", 1, 14),
        _report(other_ref, "count", "7", 15),
    ]
    for n, message in enumerate(bad, start=1):  # one at a time: unsent reports coalesce
        agent.send(message)
        await agent.wait_for(
            lambda n=n: agent.all_acked and len(agent.errors) >= errors_before + n, DEADLINE
        )
    agent.send(_report(ref, "status", 2, 16))
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    errors = agent.errors[errors_before:]
    assert [e.code for e in errors] == [ErrorCode.INVALID_MESSAGE] * 4 + [ErrorCode.FORBIDDEN]
    text = [e.message for e in errors]
    assert "TypeMismatch" in text[0] and "'status'" in text[0]
    assert "'brightness' is not defined in DeviceModel 'vled-01'" in text[1]
    assert "timestamp" in text[2]
    assert "not a Device" in text[3]
    assert "not assigned to node" in text[4]
    obj = await kube.get(DEVICES, "vled-instance-01", namespace)
    assert reported_value(obj, "status") == "2"
    assert reported_value(await kube.get(DEVICES, "counter-instance", namespace), "count") is None
    assert agent.connected and agent.sessions == 1

    # a desired value the model refuses: shown as rejected, not sent
    await update_desired(kube, namespace, "vled-instance-01", {"status": "bright"})
    await agent.wait_for(
        lambda: agent.desired[uid].version == desired_version(3, revision), DEADLINE
    )
    assert agent.desired[uid].properties == {}

    async def rejected() -> bool:
        obj = await kube.get(DEVICES, "vled-instance-01", namespace)
        return twin(obj, "status").get("rejectedDesired", {}).get("reason") == "TypeMismatch"

    await eventually(rejected, "rejectedDesired in the Device status")
    obj = await kube.get(DEVICES, "vled-instance-01", namespace)
    assert twin(obj, "status")["rejectedDesired"]["generation"] == 3
    assert reported_value(obj, "status") == "2"  # the reported value is kept

    # status writes (reports, rejections) never came back down as object_upserts
    assert sum(n for (u, _), n in agent.upserts.items() if u == uid) == upserts_before + 1
    assert hub.registry.get(node) is not None


async def test_reconnect_sends_the_full_desired_state_after_the_objects(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await install_device_crds(kube)
    node = unique("edge-dev")
    await kube.create(DEVICEMODELS, model(VLED_MODEL, namespace))
    vled = await kube.create(DEVICES, device(VLED_DEVICE, namespace, node, desired={"status": "1"}))
    uid = vled["metadata"]["uid"]
    await hubs.start(extensions=[devices_extension(DevicesSettings())])
    agent = hubs.agent(node)
    await agent.wait_for(lambda: uid in agent.desired, DEADLINE)
    agent.abandon()  # offline: nothing reaches it
    await update_desired(kube, namespace, "vled-instance-01", {"status": "0"})
    await update_desired(kube, namespace, "vled-instance-01", {"status": "1"})
    # the Device deleted and recreated under its name meanwhile: a new device
    await kube.delete(DEVICES, "vled-instance-01", namespace)
    again = await kube.create(
        DEVICES, device(VLED_DEVICE, namespace, node, desired={"status": "0"})
    )
    new_uid = again["metadata"]["uid"]
    back = agent.restarted()
    hubs.agents.append(back)
    back.start()
    await back.wait_for(lambda: back.synced and new_uid in back.desired, DEADLINE)
    assert uid not in back.store  # the old device was deleted by the sync
    assert back.desired[new_uid].properties == {"status": 0}
    revision = model_revision(await kube.get(DEVICEMODELS, "vled-01", namespace))
    assert back.desired[new_uid].version == desired_version(
        again["metadata"]["generation"], revision
    )


def test_packaged_crds_are_the_deployed_ones() -> None:
    from cloudhub.devices.extension import CRD_DIR
    from tests.twins.kubeedge import REPO

    packaged = sorted(CRD_DIR.glob("devices.kubeedge.io_*.yaml"))
    assert [p.name for p in packaged] == [
        "devices.kubeedge.io_devicemodels.yaml",
        "devices.kubeedge.io_devices.yaml",
    ]
    for path in packaged:
        assert path.read_bytes() == (REPO / "deploy" / "crds" / path.name).read_bytes()


async def test_twins_off_by_setting_or_without_the_crds(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    off = devices_extension(DevicesSettings(enabled=False))
    missing = devices_extension(DevicesSettings())
    hub = await hubs.start(extensions=[off, missing])  # no CRDs in this API: the hub runs
    assert not off.enabled and off.devices is None
    assert not missing.enabled and missing.devices is None
    agent = hubs.agent(unique("edge-plain"))
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    assert hub.registry.get(agent.name) is not None


async def test_the_embedded_api_gets_the_crds(tmp_path, pki_ca) -> None:
    from cloudhub.hub import Hub
    from cloudhub.settings import load_hub_settings
    from tests.cloudhub.hub.conftest import TEST_SETTINGS

    settings = load_hub_settings(
        overrides={
            **TEST_SETTINGS,
            "kube.embedded_data_dir": str(tmp_path / "api"),
            "kube.embedded_port": 0,
        }
    )
    twins = devices_extension(settings.devices)
    async with Hub(settings, credentials=pki_ca.server, extensions=[twins]) as hub:
        assert settings.kube.mode == "embedded"
        assert twins.enabled and twins.devices is not None and twins.devices.synced.is_set()
        assert hub.kube is not None
        items, _ = await hub.kube.list(DEVICES, limit=1)  # served, empty
        assert items == []
        created = await hub.kube.create(DEVICEMODELS, model(VLED_MODEL, "default"))
        assert created["spec"]["properties"][0]["type"] == "INT"


async def test_a_report_is_acknowledged_only_once_written(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await install_device_crds(kube)
    node = unique("edge-dev")
    await kube.create(DEVICEMODELS, model(VLED_MODEL, namespace))
    vled = await kube.create(DEVICES, device(VLED_DEVICE, namespace, node))
    uid = vled["metadata"]["uid"]
    # one write every 2 s: the second report's write waits for a token
    await hubs.start(extensions=[devices_extension(DevicesSettings(qps=0.5, burst=1))])
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced and uid in agent.store, DEADLINE)
    ref = agent.store[uid][0]
    for version, value in ((1, 1), (2, 0)):
        agent.send(_report(ref, "status", value, version))
        await agent.wait_for(lambda: agent.all_acked, DEADLINE)
        # acknowledged => already in the API (an ack before the write would see the old one)
        obj = await kube.get(DEVICES, "vled-instance-01", namespace)
        assert twin(obj, "status")["reported"]["metadata"]["version"] == str(version)
        assert reported_value(obj, "status") == str(value)
