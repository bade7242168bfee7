"""Edge metrics end to end: ``cloudhub serve`` on its embedded API, a real agent process
sampling this host (psutil, the process runtime's container stats) and delivering over
real QUIC with real certificates.

- the edge's figures reach the hub's Prometheus ``/metrics`` and agree with what psutil
  says about the same host; ``kubectl top node`` and ``kubectl top pod`` (Debian's
  kubectl 1.20.2) show the edge node and its pod through the embedded API; the Node's
  MemoryPressure follows the edge's figures and the configured threshold;
- a hub outage: the agent keeps sampling, and after the hub is back the backlog arrives,
  oldest first, covering the whole outage;
- a client speaking the real protocol with a real node certificate sends a malformed, an
  oversized and a misaddressed batch: each is refused with a clear error, the session
  goes on.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import urllib.request

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cloudhub.kube import NAMESPACES, PODS, KubeClient
from protocol.errors import ErrorCode
from protocol.messages import MetricsBatch
from protocol.metrics_codec import Batch, Metric, Sample, encode_batch, to_samples_field
from tests.edgeagent.hublink.fleet import eventually, unique
from tests.edgeagent.hublink.objects import get_node, get_pod, is_running, pod
from tests.sim import SimAgent, node_credentials

pytestmark = pytest.mark.slow

#: Agent settings: a sample a second, a batch every two (the defaults are 15 s and 60 s).
FAST_METRICS = ("metrics.sample_interval_s=1", "metrics.batch_interval_s=2")


def scrape(hub) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The hub's ``/metrics``, parsed: (sample name, sorted labels) → value."""
    url = f"http://127.0.0.1:{hub.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def series(hub, name: str, **labels: str) -> float | None:
    found = await asyncio.to_thread(scrape, hub)
    return found.get((name, tuple(sorted(labels.items()))))


async def kubectl_run(kubectl: str, hub, *args: str) -> str:
    proc = await asyncio.to_thread(
        subprocess.run,
        [kubectl, "--kubeconfig", str(hub.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        return ""
    return proc.stdout


@pytest.mark.parametrize("hub", [("--metrics-memory-available-ratio", "0.99")], indirect=True)
async def test_edge_metrics_reach_prometheus_kubectl_top_and_node_conditions(
    hub, kube: KubeClient, agent, kubectl: str
) -> None:
    node = unique("edge-top")
    namespace = unique("top")
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    busy = pod("busy", namespace, node, "while :; do :; done")
    busy["metadata"]["labels"] = {"app": "busy"}
    await kube.create(PODS, busy)
    agent(node, *FAST_METRICS)

    async def running():
        return is_running(await get_pod(kube, namespace, "busy"))

    await eventually(running, "pod busy Running")
    labels = {"container": "app", "namespace": namespace, "node": node, "pod": "busy"}

    async def container_cpu() -> float | None:
        value = await series(hub, "edgefleet_container_cpu_usage_seconds_total", **labels)
        return value if value else None

    await eventually(container_cpu, "the pod's CPU on the hub's /metrics")
    found = await asyncio.to_thread(scrape, hub)

    def node_value(name: str, **extra: str) -> float:
        return found[(name, tuple(sorted({"node": node, **extra}.items())))]

    # The same host seen by psutil: capacities exactly (KiB resolution), the rest within
    # what other processes on this shared machine may change meanwhile.
    memory = psutil.virtual_memory()
    assert node_value("edgefleet_node_memory_capacity_bytes") == memory.total
    assert abs(node_value("edgefleet_node_memory_available_bytes") - memory.available) < (
        0.15 * memory.total
    )
    disk = shutil.disk_usage("/")
    assert (
        abs(node_value("edgefleet_node_filesystem_capacity_bytes", filesystem="root") - disk.total)
        < 4096
    )
    assert node_value("edgefleet_node_cpu_capacity_cores") == psutil.cpu_count()
    assert (
        abs(node_value("edgefleet_node_uptime_seconds") - (time.time() - psutil.boot_time())) < 30
    )
    assert node_value("edgefleet_node_cpu_usage_seconds_total") > 0
    # a busy loop: close to a core while it runs (generous: the machine is shared)
    assert (
        found[("edgefleet_container_memory_working_set_bytes", tuple(sorted(labels.items())))] > 0
    )

    # kubectl top through the embedded API's metrics.k8s.io
    async def top_node() -> str:
        out = await kubectl_run(kubectl, hub, "top", "node", node)
        return out if node in out else ""

    out = await eventually(top_node, "kubectl top node")
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)", "MEMORY%"], out
    name, cpu, _, mem, mem_pct = row.split()
    assert name == node and cpu.endswith("m") and mem.endswith("Mi") and mem_pct.endswith("%")
    assert int(mem[:-2]) * 2**20 == pytest.approx(
        node_value("edgefleet_node_memory_working_set_bytes"), rel=0.2
    )

    async def top_pod() -> str:
        out = await kubectl_run(kubectl, hub, "top", "pod", "-n", namespace)
        return out if "busy" in out else ""

    out = await eventually(top_pod, "kubectl top pod")
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "CPU(cores)", "MEMORY(bytes)"], out
    name, cpu, mem = row.split()
    # a busy loop: well above idle (a loaded 2-core machine gave it only 90m once)
    assert name == "busy" and cpu.endswith("m") and int(cpu[:-1]) >= 20, out
    listed = await kubectl_run(kubectl, hub, "top", "node")
    assert node in listed
    # label selectors: the Node's labels, the pod's labels
    edge = await kubectl_run(kubectl, hub, "top", "node", "-l", "node-role.kubernetes.io/edge")
    assert node in edge
    assert node not in await kubectl_run(kubectl, hub, "top", "node", "-l", "site=elsewhere")
    selected = await kubectl_run(kubectl, hub, "top", "pod", "-n", namespace, "-l", "app=busy")
    assert "busy" in selected
    assert "busy" not in await kubectl_run(
        kubectl, hub, "top", "pod", "-n", namespace, "-l", "app=other"
    )

    # the Node carries the edge's pressure verdict (hub threshold: 99 % must be free)
    async def pressed():
        n = await get_node(kube, node)
        for c in (n or {}).get("status", {}).get("conditions") or ():
            if c["type"] == "MemoryPressure" and c["status"] == "True":
                return c
        return None

    condition = await eventually(pressed, "MemoryPressure=True")
    assert condition["reason"] == "KubeletHasInsufficientMemory"
    assert "threshold" in condition["message"]


async def test_a_hub_outage_loses_no_metrics(hub, kube: KubeClient, agent) -> None:
    node = unique("edge-outage")
    # samples are background writes (committed with the next commit or after this delay):
    # commit them soon, so that the backlog can be read from the store meanwhile
    edge = agent(node, *FAST_METRICS, "store.background_commit_delay=0.5")

    async def last_sample() -> float | None:
        return await series(hub, "edgefleet_node_last_sample_timestamp_seconds", node=node)

    await eventually(last_sample, "the node's metrics on the hub")
    await asyncio.to_thread(hub.stop)
    stopped_at = time.time()

    def backlog() -> int:
        return edge.read_store(lambda s: len(s.metrics().samples())) or 0

    await eventually(lambda: backlog() >= 6, "six samples kept while the hub is away")
    await asyncio.to_thread(hub.start)
    restarted_at = time.time()

    async def delivered() -> float | None:
        last = await last_sample()
        return last if last is not None and last > restarted_at else None

    last = await eventually(delivered, "the backlog delivered after the restart", 90)
    sampled = await series(hub, "edgefleet_node_sampled_seconds_total", node=node)
    # The restarted hub knows only what arrived since: the backlog, oldest first, whose
    # first window starts no later than the outage began. Its windows are contiguous, so
    # they cover at least [stopped_at, last]; a lost or out-of-order (hence dropped as a
    # duplicate) batch would leave a gap of at least one 1 s sample.
    assert sampled is not None
    assert sampled >= last - stopped_at - 0.5, (sampled, last - stopped_at)
    assert sampled <= last - stopped_at + 10  # and nothing counted twice
    # the whole backlog may have left in one batch (up to 240 samples each)
    accepted = await series(hub, "edgefleet_hub_metrics_batches_total", result="accepted")
    assert accepted is not None and accepted >= 1


async def test_malformed_oversized_and_misaddressed_batches_are_refused(hub, pki_ca) -> None:
    name = unique("edge-rogue")
    client = SimAgent(
        name,
        node_credentials(pki_ca.ca, name),
        host="127.0.0.1",
        quic_port=hub.port,
        websocket_port=hub.port,
        transport="quic",
    )
    client.start()
    try:
        await client.wait_for(lambda: client.synced, 30)
        t = int(time.time() * 1000)
        good = encode_batch(
            Batch(5, 1, (Sample(t, 0, {(Metric.NODE_MEMORY_CAPACITY_KIB, None): 1024}),))
        )
        client.send(MetricsBatch(node_name="not-" + name, samples=to_samples_field(good)))
        client.send(MetricsBatch(node_name=name, samples={"p": [b"\x01garbage"]}))
        noisy = [
            Sample(t + i, 1, {(Metric.NODE_MEMORY_AVAILABLE_KIB, None): (i * 7919) % 10**9})
            for i in range(100_000)
        ]
        big = encode_batch(Batch(5, 2, tuple(noisy)))
        assert 256 * 1024 < len(big) < 4 * 2**20  # over the hub's default limit, a valid frame
        client.send(MetricsBatch(node_name=name, samples=to_samples_field(big)))
        client.send(MetricsBatch(node_name=name, samples=to_samples_field(good)))
        await client.wait_for(lambda: client.all_acked and len(client.errors) == 3, 30)
        codes = [e.code for e in client.errors]
        texts = [e.message for e in client.errors]
        assert codes == [ErrorCode.FORBIDDEN, ErrorCode.INVALID_MESSAGE, ErrorCode.INVALID_MESSAGE]
        assert "only its own metrics" in texts[0]
        assert "rejected" in texts[1]
        assert "over the hub's limit of 262144 bytes" in texts[2], texts[2]
        assert client.sessions == 1  # refused messages do not end the session
        # the good batch after them was stored
        capacity = await series(hub, "edgefleet_node_memory_capacity_bytes", node=name)
        assert capacity == 1024 * 1024
    finally:
        await client.stop()
