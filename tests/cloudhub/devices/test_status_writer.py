"""DeviceStatusWriter against the embedded API: a write from a stale cached Device gets 409,
re-reads and merges again (keeping what another writer put there); reports for a Device
recreated under its name are stale; done once written."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator

import pytest

from cloudhub.devices.conditions import ModelLookup
from cloudhub.devices.status import DeviceStatusWriter
from cloudhub.kube import DEVICEMODELS, DEVICES, KubeClient, TokenBucket
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from protocol.devices import ReportedValue, parse_device_model
from tests.twins.kubeedge import (
    COUNTER_DEVICE,
    COUNTER_MODEL,
    device,
    install_device_crds,
    model,
    reported_value,
)

NS = "default"


class Cache:
    """Stands in for the Device informer: serves the object it was given (possibly stale)."""

    def __init__(self, obj: dict | None) -> None:
        self.obj = obj

    def get(self, name: str, namespace: str = "") -> dict | None:
        return copy.deepcopy(self.obj)


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as api:
        client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        try:
            await install_device_crds(client)
            yield client
        finally:
            await client.close()


def _report(obj: dict, prop: str, value: str, version: int) -> ReportedValue:
    return ReportedValue(
        NS, obj["metadata"]["name"], obj["metadata"]["uid"], prop, value, version, time.time()
    )


async def _write(writer: DeviceStatusWriter, reports: list[ReportedValue]) -> object:
    runner = asyncio.create_task(writer.run())
    done: asyncio.Future = asyncio.get_running_loop().create_future()
    writer.submit_reports(NS, reports[0].name, reports, done.set_result)
    try:
        return await asyncio.wait_for(done, 20)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_a_stale_cache_gets_409_then_merges_over_the_fresh_device(kube: KubeClient) -> None:
    model_obj = await kube.create(DEVICEMODELS, model(COUNTER_MODEL, NS))
    parsed = parse_device_model(model_obj)
    stale = await kube.create(DEVICES, device(COUNTER_DEVICE, NS, "edge-a"))
    # another writer (an older hub, a person) sets a reported status meanwhile
    fresh = copy.deepcopy(stale)
    fresh["status"] = {
        "twins": [
            {
                "propertyName": "status",
                "reported": {"value": "OFF", "metadata": {"timestamp": "1", "version": "5"}},
            }
        ]
    }
    await kube.replace(DEVICES, fresh, subresource="status")
    writer = DeviceStatusWriter(
        kube,
        Cache(stale),
        lambda ns, name: ModelLookup(parsed, exists=True),
        TokenBucket(100, 100),
        workers=1,
    )
    outcome = await _write(writer, [_report(stale, "count", "42", 7)])
    assert outcome is None and writer.written == 1
    obj = await kube.get(DEVICES, "counter-instance", NS)
    assert reported_value(obj, "count") == "42"
    assert reported_value(obj, "status") == "OFF"  # kept: merged over the re-read Device


async def test_reports_of_a_recreated_device_are_stale(kube: KubeClient) -> None:
    model_obj = await kube.create(DEVICEMODELS, model(COUNTER_MODEL, NS))
    parsed = parse_device_model(model_obj)
    old = await kube.create(DEVICES, device(COUNTER_DEVICE, NS, "edge-a"))
    await kube.delete(DEVICES, "counter-instance", NS)
    new = await kube.create(DEVICES, device(COUNTER_DEVICE, NS, "edge-a"))
    writer = DeviceStatusWriter(
        kube,
        Cache(new),
        lambda ns, name: ModelLookup(parsed, exists=True),
        TokenBucket(100, 100),
        workers=1,
    )
    outcome = await _write(writer, [_report(old, "count", "1", 3)])
    # Done (acked), the report not written; the only write is the new Device's
    # ModelAvailable condition, which it did not have yet.
    assert outcome is None and writer.written == 1
    written = await kube.get(DEVICES, "counter-instance", NS)
    assert [c["type"] for c in written["status"]["conditions"]] == ["ModelAvailable"]
    assert reported_value(await kube.get(DEVICES, "counter-instance", NS), "count") is None
