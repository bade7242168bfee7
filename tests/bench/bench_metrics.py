"""Metrics: bytes on the wire per node, the idle agent's uplink, a 10,000-node scrape.

What is measured, and how:

- **Batches** are made by the real pipeline: synthetic samples of a typical node (below)
  go through ``MetricsForwarder`` (in-memory storage, default settings), come out as
  sealed bodies (``protocol.metrics_codec``) and are framed by the protocol codec
  (``protocol.encode(MetricsBatch(...), seq)``, length prefix included).
- **Typical node**: a Raspberry Pi class machine, 4 CPUs at 2-8 % busy, 3.9 GB of RAM
  drifting by up to 300 KiB per sample, one 30 GB filesystem holding ``/`` and the state
  directory, 3-30 kB per 15 s each way on the network, one thermal zone, no GPU, five
  containers of 10-80 MiB using 10-300 ms of CPU per 15 s. Values are drawn at random
  (uniformly) every sample, which is noisier, hence larger on the wire, than a real idle
  node.
- **Idle uplink** (``metrics.idle_uplink_kbit_s``) is measured on real sockets: ``cloudhub
  serve`` in a process of its own on its embedded API, and a real ``edgeagent run``
  process (production defaults, process runtime, five idle pods, metrics of this host)
  whose session goes through a byte-counting relay (``bench_e2e.Relay``: UDP for QUIC,
  TCP for WebSocket; one agent per transport, at the same time). Once the pods' container
  metrics have reached the hub (steady state), the relay's counters are reset and read
  after the window: everything the agent sends (pings, metrics batches, acks; QUIC
  headers, AEAD tags and QUIC ACK frames, or TLS records and WebSocket framing). The goal
  value is QUIC (the agent's default transport) with 28 bytes of IPv4 + UDP header added
  per datagram; WebSocket is reported without TCP/IP headers (the relay sees a stream,
  not segments). The full run uses the default intervals (15 s samples, 60 s batches,
  the hub's 20 s heartbeat) for 10 minutes. ``--quick`` divides all three intervals by
  10 and counts 24 s (4 batches, 12 pings: 4 minutes at the defaults), then gives the
  figures per second at the defaults (bytes / (window x 10)): the same messages, only
  closer together (the counters' increments are smaller, so a batch is a few bytes
  shorter).
- **Scrape**: 10,000 nodes each ingest one typical batch (five pods each in the pod
  index); the time is ``EdgeMetricsExposition.render()``, the first scrape after every
  node got a new batch (nothing cached: the worst case). The same store scraped through
  prometheus-client (``EdgeMetricsCollector`` + ``generate_latest``) is reported beside
  it. ``--quick`` uses 2,000 nodes and scales the time linearly.
"""

from __future__ import annotations

import asyncio
import pathlib
import random
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Sequence
from typing import Any

import msgpack
from prometheus_client import CollectorRegistry, generate_latest

from cloudhub.metrics import (
    EdgeMetricsCollector,
    EdgeMetricsExposition,
    EdgeMetricsStore,
    PodIndex,
)
from edgeagent.metrics import MemoryMetricsStorage, MetricsForwarder, MetricsSettings
from protocol import MetricsBatch, SessionConfig, encode
from protocol.metrics_codec import Metric, Sample, SeriesKey, container_key, to_samples_field

M = Metric


def typical_node_samples(
    count: int,
    *,
    containers: int = 5,
    zones: Sequence[str] = ("cpu-thermal",),
    gpus: Sequence[str] = (),
    seed: int = 1,
    t0_ms: int = 1_700_000_000_000,
    interval_ms: int = 15_000,
) -> list[Sample]:
    """Synthetic samples of a typical edge node (see the module docstring), oldest first.

    The first sample has a window like the others (the sampler had already run).
    """
    rnd = random.Random(seed)
    keys = [
        container_key("default", f"sensor-{i}-7d9f8b6c5-x2k4p", "main") for i in range(containers)
    ]
    capacity = 3_900_000
    available = 2_700_000
    fs_used = 9_000_000
    uptime = 3 * 86_400
    temps = dict.fromkeys(zones, 480)
    gpu_load = dict.fromkeys(gpus, 100)
    cmem = [rnd.randint(10_000, 80_000) for _ in keys]
    samples = []
    for i in range(count):
        t = t0_ms + i * interval_ms + rnd.randint(-3, 3)
        window = interval_ms + rnd.randint(-3, 3)
        available += rnd.randint(-300, 300)
        fs_used += rnd.randint(0, 40)
        uptime += interval_ms // 1000
        values: dict[SeriesKey, int] = {
            (M.NODE_CPU_USAGE_MS, None): rnd.randint(1200, 4800),
            (M.NODE_CPU_CAPACITY_MILLICORES, None): 4000,
            (M.NODE_MEMORY_AVAILABLE_KIB, None): available,
            (M.NODE_MEMORY_CAPACITY_KIB, None): capacity,
            (M.NODE_FS_ROOT_CAPACITY_KIB, None): 30_000_000,
            (M.NODE_FS_ROOT_AVAILABLE_KIB, None): 30_000_000 - fs_used - 1_500_000,
            (M.NODE_FS_ROOT_USED_KIB, None): fs_used,
            (M.NODE_FS_STATE_CAPACITY_KIB, None): 30_000_000,
            (M.NODE_FS_STATE_AVAILABLE_KIB, None): 30_000_000 - fs_used - 1_500_000,
            (M.NODE_FS_STATE_USED_KIB, None): fs_used,
            (M.NODE_NETWORK_RECEIVE_BYTES, None): rnd.randint(3_000, 30_000),
            (M.NODE_NETWORK_TRANSMIT_BYTES, None): rnd.randint(3_000, 30_000),
            (M.NODE_LOAD1_CENTI, None): rnd.randint(5, 60),
            (M.NODE_LOAD5_CENTI, None): rnd.randint(10, 40),
            (M.NODE_LOAD15_CENTI, None): rnd.randint(15, 30),
            (M.NODE_UPTIME_SECONDS, None): uptime,
        }
        for zone in temps:
            temps[zone] += rnd.randint(-5, 5)
            values[(M.NODE_TEMPERATURE_DECICELSIUS, zone)] = temps[zone]
        for gpu in gpu_load:
            gpu_load[gpu] = max(0, min(1000, gpu_load[gpu] + rnd.randint(-50, 50)))
            values[(M.NODE_GPU_UTILIZATION_PERMILLE, gpu)] = gpu_load[gpu]
            values[(M.NODE_GPU_MEMORY_USED_KIB, gpu)] = 400_000 + rnd.randint(-2000, 2000)
            values[(M.NODE_GPU_FREQUENCY_MHZ, gpu)] = rnd.choice((306, 624, 918))
        for j, key in enumerate(keys):
            cmem[j] += rnd.randint(-50, 50)
            values[(M.CONTAINER_CPU_USAGE_MS, key)] = rnd.randint(10, 300)
            values[(M.CONTAINER_MEMORY_WORKING_SET_KIB, key)] = cmem[j]
        samples.append(Sample(t, window, values))
    return samples


def typical_pods(containers: int = 5) -> list[dict]:
    """The pods matching :func:`typical_node_samples`' container keys (no nodeName)."""
    return [
        {
            "metadata": {"namespace": "default", "name": f"sensor-{i}-7d9f8b6c5-x2k4p"},
            "spec": {"containers": [{"name": "main"}]},
        }
        for i in range(containers)
    ]


def metrics_frame_bytes(node_name: str, body: bytes, seq: int) -> int:
    """Bytes of a ``metrics_batch`` frame made by the real codec (length prefix included)."""
    message = MetricsBatch(node_name=node_name, samples=to_samples_field(body))
    return len(encode(message, seq))


def batches_for_hour(samples: Sequence[Sample]) -> list[bytes]:
    """Feed samples through a real forwarder at default settings; seal every 4 samples."""
    settings = MetricsSettings()
    per_batch = round(settings.batch_interval_s / settings.sample_interval_s)
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    bodies = []
    for i, sample in enumerate(samples, 1):
        forwarder.add(sample)
        if i % per_batch == 0:
            batch = forwarder.seal()
            assert batch is not None
            bodies.append(batch.body)
            forwarder.acked(batch.batch_seq)
    return bodies


def kbit_s(total_bytes: float, seconds: float) -> float:
    return total_bytes * 8 / seconds / 1000


# --- the idle uplink, measured on the socket ------------------------------------------------

#: Idle pods on the measured agent (process runtime): the typical node's five containers.
IDLE_PODS = 5
#: IPv4 (20) + UDP (8) header bytes per datagram, added to the UDP payload the relay sees.
IP_UDP_HEADERS = 28


async def _idle_uplink(
    kube: Any,
    tmp: pathlib.Path,
    pki_ca: Any,
    hub: Any,
    transport: str,
    window_s: float,
    scale: float,
) -> dict:
    """One agent process, five idle pods, its session through a byte-counting relay.

    ``scale`` > 1 runs the agent's and the hub's clocks of this traffic that many times
    faster (sample, batch and heartbeat intervals divided by it); the figures are then
    given per real second at the default intervals (bytes / (window * scale)).
    """
    from cloudhub.kube import NAMESPACES, PODS
    from tests.bench.bench_e2e import Relay, _node_ready, _pod, _running, _until
    from tests.edgeagent.hublink.fleet import AgentProcess

    defaults = MetricsSettings()
    relay = Relay(hub.port)
    await relay.start()
    node = f"idle-metrics-{transport[:2]}"
    sets = [f"hub.transports={transport}"]
    if scale != 1:
        sets += [
            f"metrics.sample_interval_s={defaults.sample_interval_s / scale}",
            f"metrics.batch_interval_s={defaults.batch_interval_s / scale}",
        ]
    agent = AgentProcess(
        tmp / node,
        node,
        "process",
        f"quic://127.0.0.1:{relay.port}",
        pki_ca.ca,
        sets=tuple(sets),
        quick=False,
    )
    namespace = f"{node}-{uuid.uuid4().hex[:6]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    agent.start()
    try:
        await _until(lambda: _node_ready(kube, node), 60, f"node {node} Ready")
        for i in range(IDLE_PODS):
            await kube.create(PODS, _pod(f"idle-{i}", namespace, node))

        async def all_running() -> bool:
            items, _ = await kube.list(PODS, namespace)
            return len(items) == IDLE_PODS and all(_running(p) for p in items)

        await _until(all_running, 120, f"{IDLE_PODS} idle pods Running")

        def containers_on_hub() -> bool:
            lines = _scrape(hub.http_port).splitlines()
            prefix = "edgefleet_container_cpu_usage_seconds_total{"
            mine = [x for x in lines if x.startswith(prefix) and f'node="{node}"' in x]
            return len(mine) == IDLE_PODS

        # steady state: the pods' containers have reached the hub in a batch
        await _until(
            lambda: asyncio.to_thread(containers_on_hub),
            120 + 2 * defaults.batch_interval_s,
            "container metrics on the hub",
        )
        relay.reset()
        start = time.monotonic()
        await asyncio.sleep(window_s)  # the measurement window: counting, not waiting
        window = time.monotonic() - start
        up, down = relay.up, relay.down
        up_dgrams, down_dgrams = relay.up_datagrams, relay.down_datagrams
        real_s = window * scale
        result = {
            "transport": agent.hub_session().get("transport"),
            "window_s": round(window, 1),
            "time_scale": scale,
            "default_intervals_s_covered": round(real_s, 1),
            "uplink_bytes": up,
            "downlink_bytes": down,
            "uplink_bytes_per_h": round(up * 3600 / real_s),
            "uplink_kbit_s": round(kbit_s(up, real_s), 4),
            "downlink_kbit_s": round(kbit_s(down, real_s), 4),
        }
        if transport == "quic":
            result["uplink_datagrams"] = up_dgrams
            result["downlink_datagrams"] = down_dgrams
            result["uplink_kbit_s_with_ip_udp_headers"] = round(
                kbit_s(up + IP_UDP_HEADERS * up_dgrams, real_s), 4
            )
        return result
    finally:
        await agent.stop()
        await agent.remove_everything()
        await relay.aclose()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


async def _measure_idle(quick: bool, tmp: pathlib.Path) -> dict:
    from cloudhub.kube import KubeClient
    from tests.bench.bench_e2e import HubProcess
    from tests.testpki import make_test_pki

    scale = QUICK_TIME_SCALE if quick else 1.0
    window = QUICK_WINDOW_S if quick else FULL_WINDOW_S
    pki_ca = make_test_pki()
    hub = HubProcess(tmp / "hub", pki_ca)
    if scale != 1:
        hub.args += [
            "--session-heartbeat-interval",
            str(SessionConfig().ping_interval / scale),
        ]
    await asyncio.to_thread(hub.start)
    kube = await KubeClient.from_kubeconfig(str(hub.kubeconfig))
    try:
        quic, websocket = await asyncio.gather(
            _idle_uplink(kube, tmp, pki_ca, hub, "quic", window, scale),
            _idle_uplink(kube, tmp, pki_ca, hub, "websocket", window, scale),
        )
    finally:
        await kube.close()
        await asyncio.to_thread(hub.stop)
    return {"quic": quic, "websocket": websocket}


#: ``--quick``: the agent's and hub's intervals divided by this (1.5 s samples, 6 s
#: batches, 2 s heartbeats), over ``QUICK_WINDOW_S``: 4 batches and 12 pings, as in 4
#: minutes at the defaults.
QUICK_TIME_SCALE = 10.0
QUICK_WINDOW_S = 24.0
#: The full run: default intervals (15 s samples, 60 s batches, 20 s heartbeats), 10 min.
FULL_WINDOW_S = 600.0


def scrape(nodes: int, *, with_collector: bool = True) -> dict:
    """Ingest one typical batch per node, then time a cold and a warm scrape.

    The served exposition is ``EdgeMetricsExposition``; with ``with_collector`` the same
    store is also scraped through prometheus-client (``EdgeMetricsCollector``) to show
    why the hub does not serve that at fleet scale.
    """
    store = EdgeMetricsStore()
    pods = PodIndex()
    batch_samples = typical_node_samples(4)
    settings = MetricsSettings()
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    for s in batch_samples:
        forwarder.add(s)
    body = forwarder.seal()
    assert body is not None
    pod_list = typical_pods()
    start = time.perf_counter()
    for n in range(nodes):
        name = f"edge-{n:05d}"
        store.ingest(name, body.body, now=0.0)
        for pod in pod_list:
            pods.observe_pod({**pod, "spec": {**pod["spec"], "nodeName": name}})
    ingest_s = time.perf_counter() - start
    exposition = EdgeMetricsExposition(store, pods)
    start = time.perf_counter()
    text = exposition.render()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    exposition.render()
    warm = time.perf_counter() - start
    lines = sum(1 for line in text.splitlines() if not line.startswith(b"#"))
    result = {
        "nodes": nodes,
        "samples": lines,
        "exposition_bytes": len(text),
        "cold_s": round(cold, 3),
        "warm_s": round(warm, 3),
        "ingest_per_batch_us": round(ingest_s / nodes * 1e6, 1),
    }
    if with_collector:
        registry = CollectorRegistry()
        registry.register(EdgeMetricsCollector(store, pods))
        start = time.perf_counter()
        generate_latest(registry)
        result["prometheus_client_cold_s"] = round(time.perf_counter() - start, 3)
        start = time.perf_counter()
        generate_latest(registry)
        result["prometheus_client_warm_s"] = round(time.perf_counter() - start, 3)
    return result


def offline_hour_buffer_bytes(samples: Sequence[Sample]) -> int:
    """Buffer size (storage accounting) after an hour of samples with no connection."""
    storage = MemoryMetricsStorage()
    forwarder = MetricsForwarder(storage, MetricsSettings())
    for sample in samples:
        forwarder.add(sample)
    return storage.size_bytes()


def run(quick: bool) -> dict:
    hour = typical_node_samples(240)
    bodies = batches_for_hour(hour)
    node_name = "edge-node-0001"
    frames = [metrics_frame_bytes(node_name, b, 100_000 + i) for i, b in enumerate(bodies)]
    frame_mean = sum(frames) / len(frames)
    body_mean = sum(map(len, bodies)) / len(bodies)
    bare = [
        metrics_frame_bytes(node_name, b, 1)
        for b in batches_for_hour(typical_node_samples(240, containers=0))
    ]
    jetson_samples = typical_node_samples(
        240,
        zones=("AO-therm", "CPU-therm", "GPU-therm", "PLL-therm", "Tboard", "Tdiode"),
        gpus=("ga10b",),
    )
    jetson = [metrics_frame_bytes(node_name, b, 1) for b in batches_for_hour(jetson_samples)]
    naive = msgpack.packb(
        [
            {"t": s.t_ms, "w": s.window_ms, "v": [[k[0], k[1], v] for k, v in s.values.items()]}
            for s in hour[:4]
        ]
    )

    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp_name:
        idle = asyncio.run(_measure_idle(quick, pathlib.Path(tmp_name)))

    nodes = 2_000 if quick else 10_000
    scraped = scrape(nodes, with_collector=not quick)
    scrape_10k = scraped["cold_s"] * 10_000 / nodes
    results = {
        "codec": "protocol.metrics_codec v1 body inside protocol.codec frames (branch core)",
        "typical_batch_body_bytes": round(body_mean, 1),
        "typical_batch_frame_bytes": round(frame_mean, 1),
        "naive_msgpack_rows_body_bytes": len(naive),
        "metrics_frame_bytes_per_node_hour": sum(frames),
        "no_containers_frame_bytes": round(sum(bare) / len(bare), 1),
        "jetson_6_zones_gpu_frame_bytes": round(sum(jetson) / len(jetson), 1),
        "offline_hour_buffer_bytes": offline_hour_buffer_bytes(hour),
        "idle_uplink": idle,
        "uplink_is": (
            "measured: bytes agent->hub counted at a relay on the socket (UDP payload for "
            "QUIC: QUIC headers, AEAD and acks included; TLS records for WebSocket)"
            + (
                f"; --quick: intervals {QUICK_TIME_SCALE:g}x shorter, figures per second "
                "at the default intervals"
                if quick
                else "; default intervals"
            )
        ),
        "scrape": scraped,
        "scrape_10k_nodes_s": round(scrape_10k, 3),
        "scrape_scaled_from_nodes": nodes,
    }
    return {
        "results": results,
        "goals": [
            {
                "id": "metrics.idle_uplink_kbit_s",
                "value": idle["quic"]["uplink_kbit_s_with_ip_udp_headers"],
                "target": 0.1,
                "unit": "kbit/s agent->hub on the socket (QUIC + IPv4/UDP headers), idle "
                "agent with 5 pods: heartbeats and metrics at the default intervals",
                "op": "<=",
            },
            {
                "id": "metrics.scrape_10k_nodes_s",
                "value": round(scrape_10k, 3),
                "target": 2.0,
                "unit": "s",
                "op": "<=",
            },
        ],
    }
