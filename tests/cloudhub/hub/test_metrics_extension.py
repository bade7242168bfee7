"""The metrics extension in a real hub: simulated agents speaking the real protocol over
real QUIC/WebSocket with real certificates send ``metrics_batch``; the hub stores them,
acknowledges, refuses bad ones with a clear error, exposes them on ``/metrics`` and sets
the Node's pressure conditions."""

from __future__ import annotations

import asyncio
import random
import urllib.request

from cloudhub.kube import NODES, PODS, KubeClient
from cloudhub.metrics import HubMetricsSettings, MetricsExtension
from protocol.errors import ErrorCode
from protocol.messages import MetricsBatch
from protocol.metrics_codec import (
    Batch,
    Metric,
    Sample,
    container_key,
    encode_batch,
    to_samples_field,
)
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, pod
from tests.edgeagent.hublink.fleet import eventually  # returns what it waited for

T0 = 1_700_000_000_000
GIB_KIB = 1024 * 1024


def node_sample(
    t_ms: int, *, available_kib: int = 3 * GIB_KIB, window_ms: int = 15_000, containers=()
) -> Sample:
    values = {
        (Metric.NODE_CPU_USAGE_MS, None): 4_500,
        (Metric.NODE_MEMORY_AVAILABLE_KIB, None): available_kib,
        (Metric.NODE_MEMORY_CAPACITY_KIB, None): 4 * GIB_KIB,
        (Metric.NODE_FS_ROOT_CAPACITY_KIB, None): 30_000_000,
        (Metric.NODE_FS_ROOT_AVAILABLE_KIB, None): 20_000_000,
        (Metric.NODE_FS_STATE_CAPACITY_KIB, None): 30_000_000,
        (Metric.NODE_FS_STATE_AVAILABLE_KIB, None): 20_000_000,
    }
    for key in containers:
        values[(Metric.CONTAINER_CPU_USAGE_MS, key)] = 300
        values[(Metric.CONTAINER_MEMORY_WORKING_SET_KIB, key)] = 20_480
    return Sample(t_ms, window_ms, values)


def batch(node: str, seq: int, *samples: Sample, stream: int = 77) -> MetricsBatch:
    body = encode_batch(Batch(stream, seq, samples))
    return MetricsBatch(node_name=node, samples=to_samples_field(body))


def scrape(hub) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{hub.http_port}/metrics", timeout=10) as r:
        return r.read().decode()


async def _scrape(hub) -> str:
    return await asyncio.to_thread(scrape, hub)


def conditions(node: dict) -> dict[str, dict]:
    return {c["type"]: c for c in node.get("status", {}).get("conditions") or ()}


async def test_batches_are_stored_acked_and_exposed(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    extension = MetricsExtension(HubMetricsSettings())
    hub = await hubs.start(extensions=[extension])
    name = unique("edge-metrics")
    await kube.create(PODS, pod("sensor", namespace, name))
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    key = container_key(namespace, "sensor", "app")
    agent.send(
        batch(
            name,
            1,
            node_sample(T0, window_ms=0),
            node_sample(T0 + 15_000, containers=[key]),
        )
    )
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    state = extension.store.node(name)
    assert state is not None and state.t_ms == T0 + 15_000
    assert state.sampled_ms == 15_000 and state.first_t_ms == T0

    text = await _scrape(hub)
    assert f'edgefleet_node_memory_available_bytes{{node="{name}"}} {3 * 1024**3}' in text
    assert f'edgefleet_node_cpu_usage_seconds_total{{node="{name}"}} 4.5' in text
    labels = f'container="app",namespace="{namespace}",node="{name}",pod="sensor"'
    assert f"edgefleet_container_memory_working_set_bytes{{{labels}}} {20_480 * 1024}" in text
    assert f"edgefleet_container_cpu_usage_seconds_total{{{labels}}} 0.3" in text
    # the hub's own metrics are still there
    assert "edgefleet_hub_connected_nodes" in text

    # a resend of the same batch (after a reconnect) is acknowledged, not counted twice
    agent.send(batch(name, 1, node_sample(T0 + 15_000, containers=[key])))
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    assert extension.store.stats.duplicate == 1
    text = await _scrape(hub)
    assert f'edgefleet_node_cpu_usage_seconds_total{{node="{name}"}} 4.5' in text
    assert not agent.errors


async def test_bad_batches_are_refused_with_a_clear_error_and_acked(
    hubs: Hubs, kube: KubeClient, unique
) -> None:
    extension = MetricsExtension(HubMetricsSettings(max_batch_bytes=2048))
    await hubs.start(extensions=[extension])
    name = unique("edge-bad")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    agent.send(batch("someone-else", 1, node_sample(T0)))
    agent.send(MetricsBatch(node_name=name, samples={"p": [b"\x07not a metrics body"]}))
    agent.send(MetricsBatch(node_name=name, samples={"cpu": [1, 2, 3]}))
    rnd = random.Random(1)  # noisy values: the codec packs regular ones into a few bytes
    big = [
        node_sample(T0 + i * 15_000, available_kib=rnd.randint(1, 3 * GIB_KIB)) for i in range(400)
    ]
    oversized = batch(name, 1, *big)
    assert len(oversized.samples["p"][0]) > 2048
    agent.send(oversized)
    await agent.wait_for(lambda: agent.all_acked and len(agent.errors) == 4, DEADLINE)

    codes = [e.code for e in agent.errors]
    texts = [e.message for e in agent.errors]
    assert codes == [ErrorCode.FORBIDDEN] + [ErrorCode.INVALID_MESSAGE] * 3, texts
    assert "someone-else" in texts[0] and "only its own metrics" in texts[0]
    assert "rejected" in texts[1]
    assert "one binary value" in texts[2]
    assert "over the hub's limit of 2048 bytes" in texts[3], texts[3]
    assert all(e.in_reply_to is not None for e in agent.errors)
    assert extension.store.node(name) is None and extension.store.node("someone-else") is None

    # the session goes on: a good batch afterwards is stored
    agent.send(batch(name, 2, node_sample(T0)))
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    assert extension.store.node(name) is not None
    assert agent.sessions == 1


async def test_memory_pressure_follows_the_edge_figures(
    hubs: Hubs, kube: KubeClient, unique
) -> None:
    extension = MetricsExtension(
        HubMetricsSettings(memory_available_ratio=0.25, pressure_transition_period=0.0)
    )
    await hubs.start(extensions=[extension])
    name = unique("edge-pressure")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)

    async def condition(kind: str) -> dict | None:
        try:
            node = await kube.get(NODES, name)
        except Exception:
            return None
        return conditions(node).get(kind)

    async def memory_is(status: str) -> dict | None:
        found = await condition("MemoryPressure")
        return found if found is not None and found["status"] == status else None

    # 400 MiB of 4 GiB available (~10 %), threshold 25 % (1 GiB): MemoryPressure=True
    agent.send(batch(name, 1, node_sample(T0, available_kib=400 * 1024)))
    pressed = await eventually(lambda: memory_is("True"), "MemoryPressure=True", DEADLINE)
    assert pressed["reason"] == "KubeletHasInsufficientMemory"
    assert "400Mi of 4096Mi available, threshold 1024Mi" in pressed["message"], pressed
    disk = await condition("DiskPressure")
    assert disk is not None and disk["status"] == "False"
    assert disk["reason"] == "KubeletHasNoDiskPressure"

    # the periodic Ready heartbeat (every second here) keeps the edge's verdict
    beat = (await condition("Ready"))["lastHeartbeatTime"]

    async def next_heartbeat() -> bool:
        ready = await condition("Ready")
        return ready is not None and ready["lastHeartbeatTime"] != beat

    await eventually(next_heartbeat, "a later Ready heartbeat", DEADLINE)
    assert (await condition("MemoryPressure"))["status"] == "True"

    # plenty again: back to False (no transition period configured)
    agent.send(batch(name, 2, node_sample(T0 + 15_000, available_kib=3 * GIB_KIB)))
    relieved = await eventually(lambda: memory_is("False"), "MemoryPressure=False", DEADLINE)
    assert relieved["reason"] == "KubeletHasSufficientMemory"
    assert relieved["lastTransitionTime"] >= pressed["lastTransitionTime"]


async def test_metrics_off_leaves_batches_unsupported(hubs: Hubs, unique) -> None:
    extension = MetricsExtension(HubMetricsSettings(enabled=False))
    hub = await hubs.start(extensions=[extension])
    name = unique("edge-off")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    agent.send(batch(name, 1, node_sample(T0)))
    await agent.wait_for(lambda: agent.all_acked and len(agent.errors) == 1, DEADLINE)
    assert agent.errors[0].code is ErrorCode.UNSUPPORTED
    assert "edgefleet_node_" not in await _scrape(hub)
