"""Metrics: bytes on the wire per node, the idle agent's uplink, a 10,000-node scrape.

What is measured, and how:

- **Batches** are made by the real pipeline: synthetic samples of a typical node (below)
  go through ``MetricsForwarder`` (in-memory storage, default settings) and come out as
  sealed ``metrics_batch`` bodies (``protocol.metrics_codec``). Branch ``core`` has no
  frame codec yet, so the frame is measured as the 4-byte length prefix plus
  ``msgpack.packb({"k": "metrics_batch", "s": seq, "b": {"node_name": ..., "samples":
  body}})``, the envelope ``docs/protocol.md`` specifies.
- **Typical node**: a Raspberry Pi class machine, 4 CPUs at 2-8 % busy, 3.9 GB of RAM
  drifting by up to 300 KiB per sample, one 30 GB filesystem holding ``/`` and the state
  directory, 3-30 kB per 15 s each way on the network, one thermal zone, no GPU, five
  containers of 10-80 MiB using 10-300 ms of CPU per 15 s. Values are drawn at random
  (uniformly) every sample, which is noisier, hence larger on the wire, than a real idle
  node.
- **Idle uplink** is an *estimate* from a packet model, until the agent is wired and the
  lead measures it on real sockets. Per minute at the defaults (batch every 60 s, ping
  after 20 s of silence, ``docs/protocol.md``): the hub's ack of each batch resets the
  ping timer, so two pings per minute; each ping and each batch is one QUIC 1-RTT packet
  (short header: 1 + 8-byte connection id, aioquic's default + 2-byte packet number, a
  STREAM frame header of 8 bytes, a 16-byte AEAD tag, UDP 8 + IPv4 20: 63 bytes around
  the frame); each packet from the hub that elicits an ack (two pongs and one ack per
  minute) costs one ACK-only packet back (aioquic acks after 1 ms, so nothing coalesces
  on an idle link: 64 bytes with the ACK frame). The same figure for WebSocket over TLS
  over TCP is reported for reference.
- **Scrape**: 10,000 nodes each ingest one typical batch (five pods each in the pod
  index); the time is ``EdgeMetricsExposition.render()``, the first scrape after every
  node got a new batch (nothing cached: the worst case). The same store scraped through
  prometheus-client (``EdgeMetricsCollector`` + ``generate_latest``) is reported beside
  it. ``--quick`` uses 2,000 nodes and scales the time linearly.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import msgpack
from prometheus_client import CollectorRegistry, generate_latest

from cloudhub.metrics import (
    EdgeMetricsCollector,
    EdgeMetricsExposition,
    EdgeMetricsStore,
    PodIndex,
)
from edgeagent.metrics import MemoryMetricsStorage, MetricsForwarder, MetricsSettings
from protocol.metrics_codec import Metric, Sample, SeriesKey, container_key

M = Metric

QUIC_DATA_OVERHEAD = 1 + 8 + 2 + 8 + 16 + 8 + 20
"""Bytes around a frame in a QUIC 1-RTT packet over UDP/IPv4 (see the module docstring)."""
QUIC_ACK_PACKET = 1 + 8 + 2 + 9 + 16 + 8 + 20
"""Bytes of an ACK-only QUIC packet over UDP/IPv4."""
TCP_TLS_WS_OVERHEAD = 5 + 1 + 16 + 2 + 4 + 20 + 32 + 20
"""TLS 1.3 record (5 header + 1 type + 16 tag), masked client WebSocket header (2 + 4),
TCP with timestamps (32), IPv4 (20)."""
TCP_ACK_PACKET = 32 + 20
"""A bare TCP ACK with timestamps over IPv4."""


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
    """Bytes of a ``metrics_batch`` frame: length prefix + msgpack envelope."""
    envelope = {"k": "metrics_batch", "s": seq, "b": {"node_name": node_name, "samples": body}}
    return 4 + len(msgpack.packb(envelope))


def ping_frame_bytes() -> int:
    """Bytes of a ``ping`` frame with a 32-bit nonce."""
    return 4 + len(msgpack.packb({"k": "ping", "b": {"nonce": 0x9E3779B9}}))


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


def uplink_per_minute(batch_frame: int, *, pings: int = 2, hub_packets: int = 3) -> dict:
    """Bytes per minute the idle agent sends, by transport (see the module docstring)."""
    ping = ping_frame_bytes()
    quic = (
        pings * (QUIC_DATA_OVERHEAD + ping)
        + (QUIC_DATA_OVERHEAD + batch_frame)
        + hub_packets * QUIC_ACK_PACKET
    )
    tcp = (
        pings * (TCP_TLS_WS_OVERHEAD + ping)
        + (TCP_TLS_WS_OVERHEAD + batch_frame)
        + hub_packets * TCP_ACK_PACKET
    )
    heartbeat_only_quic = pings * (QUIC_DATA_OVERHEAD + ping) + pings * QUIC_ACK_PACKET
    return {"quic": quic, "websocket_tcp": tcp, "heartbeats_only_quic": heartbeat_only_quic}


def kbit_s(bytes_per_minute: float) -> float:
    return bytes_per_minute * 8 / 60 / 1000


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
    per_minute = uplink_per_minute(round(frame_mean))
    bare = typical_node_samples(240, containers=0)
    bare_frames = [metrics_frame_bytes(node_name, b, 1) for b in batches_for_hour(bare)]
    jetson = typical_node_samples(
        240,
        zones=("AO-therm", "CPU-therm", "GPU-therm", "PLL-therm", "Tboard", "Tdiode"),
        gpus=("ga10b",),
    )
    jetson_frames = [metrics_frame_bytes(node_name, b, 1) for b in batches_for_hour(jetson)]
    jetson_minute = uplink_per_minute(round(sum(jetson_frames) / len(jetson_frames)))
    naive = msgpack.packb(
        [
            {"t": s.t_ms, "w": s.window_ms, "v": [[k[0], k[1], v] for k, v in s.values.items()]}
            for s in hour[:4]
        ]
    )

    nodes = 2_000 if quick else 10_000
    scraped = scrape(nodes)
    scale = 10_000 / nodes
    scrape_10k = scraped["cold_s"] * scale
    idle = kbit_s(per_minute["quic"])
    results = {
        "codec": "protocol.metrics_codec v1 body; frame = 4 + msgpack envelope (core frame "
        "codec not merged yet)",
        "typical_batch_body_bytes": round(body_mean, 1),
        "typical_batch_frame_bytes": round(frame_mean, 1),
        "naive_msgpack_rows_body_bytes": len(naive),
        "metrics_bytes_per_node_hour": sum(frames),
        "no_containers_frame_bytes": round(sum(bare_frames) / len(bare_frames), 1),
        "jetson_6_zones_gpu_frame_bytes": round(sum(jetson_frames) / len(jetson_frames), 1),
        "uplink_bytes_per_minute": per_minute,
        "idle_uplink_kbit_s_quic": round(idle, 4),
        "idle_uplink_kbit_s_websocket_tcp": round(kbit_s(per_minute["websocket_tcp"]), 4),
        "idle_uplink_kbit_s_heartbeats_only": round(kbit_s(per_minute["heartbeats_only_quic"]), 4),
        "idle_uplink_kbit_s_jetson": round(kbit_s(jetson_minute["quic"]), 4),
        "uplink_is": "estimate from a packet model (see bench_metrics.py); to be replaced by "
        "a measurement on real sockets",
        "offline_hour_buffer_bytes": offline_hour_buffer_bytes(hour),
        "scrape": scraped,
        "scrape_10k_nodes_s": round(scrape_10k, 3),
        "scrape_scaled_from_nodes": nodes,
    }
    return {
        "results": results,
        "goals": [
            {
                "id": "metrics.idle_uplink_kbit_s",
                "value": round(idle, 4),
                "target": 0.1,
                "unit": "kbit/s",
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
