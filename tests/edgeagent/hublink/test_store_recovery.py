"""End to end (issue 15 item 6a): an agent whose store was damaged while it was down starts
offline with an empty store and keeps every running pod; when the hub returns, its full
sync removes only the pod deleted meanwhile, and the recovery is an Event on the Node,
counted on the hub's /metrics."""

from __future__ import annotations

import pathlib

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cloudhub.kube import EVENTS, PODS, KubeClient
from edgeagent.errors import StoreError
from tests.edgeagent.certs.conftest import command
from tests.edgeagent.hublink.fleet import eventually
from tests.edgeagent.hublink.objects import container_status, get_pod, is_running, pod

pytestmark = pytest.mark.slow


def adoption(agent) -> dict:
    """The agent's ``pods.adoption`` record; empty while its store cannot be read yet (the
    damaged file before the agent moved it aside)."""
    try:
        return agent.read_store(lambda s: s.get_state("pods.adoption")) or {}
    except StoreError:
        return {}


def damage(path: pathlib.Path) -> None:
    """What a power cut on an SD card can leave: the header and first pages garbage."""
    with open(path, "r+b") as f:
        f.write(b"\x00garbage" * 512)


async def test_a_damaged_store_keeps_pods_running_offline_and_the_sync_decides(
    fleet, kube: KubeClient, namespace: str
):
    agent = fleet.agent("edge-sd")
    kept = await kube.create(PODS, pod("kept", namespace, "edge-sd", "exec sleep 600"))
    dropped = await kube.create(PODS, pod("dropped", namespace, "edge-sd", "exec sleep 600"))
    kept_uid, dropped_uid = kept["metadata"]["uid"], dropped["metadata"]["uid"]

    async def both_running():
        return is_running(await get_pod(kube, namespace, "kept")) and is_running(
            await get_pod(kube, namespace, "dropped")
        )

    await eventually(both_running, "both pods Running in the API")
    kept_id = container_status(await get_pod(kube, namespace, "kept"))["containerID"]

    await agent.stop()
    await fleet.hub.stop()
    await kube.delete(PODS, "dropped", namespace, grace_period_seconds=0)
    damage(agent.state / "store.db")
    agent.start()

    record = await eventually(
        lambda: adoption(agent).get("state") == "adopting" and adoption(agent),
        "the agent's start-up scan with the recovered store",
    )
    assert record["reason"] == "StoreRecovered"
    assert sorted(record["pods"]) == sorted([kept_uid, dropped_uid])
    assert await agent.running_pods() >= {kept_uid, dropped_uid}  # offline: nothing killed
    shown = await command(
        "edgeagent", "status", "--config", str(agent.config), "--state-dir", str(agent.state)
    )
    assert shown.returncode == 0, shown.stderr
    assert "store recovered (damaged file moved to" in shown.stdout
    assert "2 running pod(s) adopted until the hub's first full sync" in shown.stdout

    await fleet.hub.start()
    await eventually(
        lambda: adoption(agent).get("state") == "ended", "the hub's full sync ended the adoption"
    )

    async def dropped_gone():
        return dropped_uid not in await agent.running_pods()

    await eventually(dropped_gone, "the pod deleted while the node was down removed")
    assert kept_uid in await agent.running_pods()
    status = container_status(await get_pod(kube, namespace, "kept"))
    assert status["containerID"] == kept_id and status["restartCount"] == 0

    async def node_event():
        items, _ = await kube.list(EVENTS, "default")
        return [
            e
            for e in items
            if e.get("reason") == "StoreRecovered"
            and (e.get("involvedObject") or {}).get("kind") == "Node"
            and e["involvedObject"].get("name") == "edge-sd"
        ]

    [event, *_] = await eventually(node_event, "the StoreRecovered Event on the Node")
    assert event["type"] == "Warning" and "store.db.corrupt-" in event["message"]
    assert await recoveries(fleet.hub.hub.http_port) == 1.0  # and the hub counted it


async def recoveries(port: int) -> float:
    """``edgefleet_hub_edge_store_recoveries_total`` from the hub's /metrics."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            text = await resp.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "edgefleet_hub_edge_store_recoveries_total":
                return sample.value
    raise AssertionError("no edgefleet_hub_edge_store_recoveries_total on /metrics")
