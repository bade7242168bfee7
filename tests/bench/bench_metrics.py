"""Metrics: bytes on the wire per node, the idle agent's uplink, a 10,000-node scrape.

What is measured, and how:

- **Batches** are made by the real pipeline: synthetic samples of a typical node (below)
  go through ``MetricsForwarder`` (in-memory storage, default settings), come out as
  sealed bodies (``protocol.metrics_codec``) and are framed by branch core's codec
  (``protocol.encode(MetricsBatch(...), seq)``, length prefix included).
- **Typical node**: a Raspberry Pi class machine, 4 CPUs at 2-8 % busy, 3.9 GB of RAM
  drifting by up to 300 KiB per sample, one 30 GB filesystem holding ``/`` and the state
  directory, 3-30 kB per 15 s each way on the network, one thermal zone, no GPU, five
  containers of 10-80 MiB using 10-300 ms of CPU per 15 s. Values are drawn at random
  (uniformly) every sample, which is noisier, hence larger on the wire, than a real idle
  node.
- **Idle uplink** is an *estimate*, until the agent is wired and the lead measures it on
  real sockets: an hour of branch core's real ``Session`` pair (client and server, default
  ``SessionConfig``: ping after 20 s), the real forwarder and the hub's store, on a
  simulated link (25 ms one way; every timer fires 0-2 ms late, as an event loop does).
  Bytes are what the client session writes, plus a per-packet model: each write is one
  QUIC 1-RTT packet (short header: 1 + 8-byte connection id, aioquic's default + 2-byte
  packet number, an 8-byte STREAM frame header, a 16-byte AEAD tag, UDP 8 + IPv4 20: 63
  bytes around the frames), and each packet from the hub costs one ACK-only packet back
  (aioquic acks after 1 ms, so on an idle link nothing coalesces: 64 bytes). The same
  figure for WebSocket over TLS over TCP is reported for reference.
- **Scrape**: 10,000 nodes each ingest one typical batch (five pods each in the pod
  index); the time is ``EdgeMetricsExposition.render()``, the first scrape after every
  node got a new batch (nothing cached: the worst case). The same store scraped through
  prometheus-client (``EdgeMetricsCollector`` + ``generate_latest``) is reported beside
  it. ``--quick`` uses 2,000 nodes and scales the time linearly.
"""

from __future__ import annotations

import heapq
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
from protocol import (
    Acked,
    FrameDecoder,
    Hello,
    HelloReceived,
    MessageReceived,
    MetricsBatch,
    Ping,
    Role,
    Session,
    SessionConfig,
    Welcome,
    encode,
)
from protocol.metrics_codec import Metric, Sample, SeriesKey, container_key, to_samples_field

M = Metric

QUIC_DATA_OVERHEAD = 1 + 8 + 2 + 8 + 16 + 8 + 20
"""Bytes around a frame in a QUIC 1-RTT packet over UDP/IPv4 (see the module docstring)."""
QUIC_ACK_PACKET = 1 + 8 + 2 + 9 + 16 + 8 + 20
"""Bytes of an ACK-only QUIC packet over UDP/IPv4."""
TCP_TLS_WS_OVERHEAD = 5 + 1 + 16 + 2 + 4 + 32 + 20
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


class _Link:
    """Two real ``protocol.Session`` s on a simulated link, driven by an event queue.

    Timers fire ``wake`` seconds late (a uniform draw in ``0..max_wake``), as an event
    loop does; bytes take ``one_way`` seconds. Every write is one packet; every packet that
    arrives at the edge from the hub makes the edge send one ACK-only packet (the QUIC
    stack acks within 1 ms, so on an idle link nothing coalesces).
    """

    def __init__(self, *, one_way: float, max_wake: float, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.one_way = one_way
        self.max_wake = max_wake
        self.now = 0.0
        self.queue: list[tuple[float, int, str, object]] = []
        self.order = 0
        self.client = Session(Role.CLIENT, SessionConfig(), now=0.0)
        self.server = Session(Role.SERVER, SessionConfig(), now=0.0)
        self.timer_at: dict[str, float | None] = {"client": None, "server": None}
        self.counting_from = 0.0
        self.up_writes: list[int] = []
        self.up_acks = 0
        self.up_kinds: dict[str, int] = {}
        self.up_times: list[tuple[float, str]] = []
        self.on_client_event = lambda event: None
        self.on_server_event = lambda event: None

    def at(self, t: float, what: str, payload: object = None) -> None:
        self.order += 1
        heapq.heappush(self.queue, (t, self.order, what, payload))

    def wake(self) -> float:
        return self.rnd.uniform(0.0, self.max_wake)

    def settle(self) -> None:
        """Drain both sessions' output and events, and re-arm their timers."""
        for name, side, other in (
            ("client", self.client, "to_server"),
            ("server", self.server, "to_client"),
        ):
            data = side.data_to_send()
            if data:
                if name == "client" and self.now >= self.counting_from:
                    self.up_writes.append(len(data))
                    decoder = FrameDecoder()
                    decoder.feed(data)
                    for _, message in decoder:
                        self.up_kinds[message.kind] = self.up_kinds.get(message.kind, 0) + 1
                        self.up_times.append((self.now, message.kind))
                self.at(self.now + self.one_way, other, data)
            handler = self.on_client_event if name == "client" else self.on_server_event
            for event in side.events_received():
                handler(event)
            deadline = side.get_timer()
            if deadline is not None and deadline != self.timer_at[name]:
                self.timer_at[name] = deadline
                self.at(max(deadline, self.now) + self.wake(), name, deadline)

    def run_until(self, t_end: float, on_tick) -> None:
        while self.queue and self.queue[0][0] <= t_end:
            self.now, _, what, payload = heapq.heappop(self.queue)
            if what == "to_server":
                self.server.receive_data(payload, self.now)
            elif what == "to_client":
                self.client.receive_data(payload, self.now)
                if self.now >= self.counting_from:
                    self.up_acks += 1
            elif what in ("client", "server"):
                if payload != self.timer_at[what]:
                    continue  # superseded
                self.timer_at[what] = None
                side = self.client if what == "client" else self.server
                side.handle_timer(self.now)
            else:
                on_tick(what, payload)
            self.settle()


def simulate_idle_hour(
    samples: Sequence[Sample],
    *,
    node_name: str = "edge-node-0001",
    seed: int = 7,
    heartbeat_interval: float | None = None,
) -> dict:
    """An hour of an idle agent: the real session, codec and forwarder on a simulated link.

    The agent samples every 15 s and hands a batch to the session after every fourth
    sample (``MetricsService``); the hub ingests and acknowledges; the session pings per
    its own rules (``ping_interval`` 20 s, or the hub's ``heartbeat_interval`` if given).
    The first ten minutes warm up; the next hour is counted.
    """
    settings = MetricsSettings()
    per_batch = round(settings.batch_interval_s / settings.sample_interval_s)
    link = _Link(one_way=0.025, max_wake=0.002, seed=seed)
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    hub = EdgeMetricsStore()
    seq_to_batch: dict[int, int] = {}

    def on_server(event: object) -> None:
        if isinstance(event, HelloReceived):
            link.server.accept(
                Welcome(
                    version=event.version,
                    hub_time=0.0,
                    session_id="s",
                    received_up_to=0,
                    heartbeat_interval=heartbeat_interval or SessionConfig().ping_interval,
                ),
                link.now,
            )
        elif isinstance(event, MessageReceived) and isinstance(event.message, MetricsBatch):
            hub.ingest(node_name, event.message.samples, link.now)

    def on_client(event: object) -> None:
        if isinstance(event, Acked):
            done = [s for s in seq_to_batch if s <= event.up_to]
            if done:
                forwarder.acked(max(seq_to_batch[s] for s in done))
                for s in done:
                    del seq_to_batch[s]

    link.on_server_event = on_server
    link.on_client_event = on_client

    def tick(what: str, index: object) -> None:
        assert isinstance(index, int)
        forwarder.add(samples[index % len(samples)])
        if (index + 1) % per_batch == 0:
            while (batch := forwarder.seal()) is not None:
                seq = link.client.send(batch.message(node_name), link.now)
                assert seq is not None
                seq_to_batch[seq] = batch.batch_seq

    link.client.connect(Hello(1, 1, node_name, "0.1.0", capabilities=("metrics",)), link.now)
    link.settle()
    warmup, hour = 600.0, 3600.0
    for i in range(int((warmup + hour) / settings.sample_interval_s) + 1):
        link.at(i * settings.sample_interval_s + link.wake(), "sample", i)
    link.counting_from = warmup
    link.run_until(warmup + hour, tick)
    writes = link.up_writes
    quic = sum(writes) + len(writes) * QUIC_DATA_OVERHEAD + link.up_acks * QUIC_ACK_PACKET
    tcp = sum(writes) + len(writes) * TCP_TLS_WS_OVERHEAD + link.up_acks * TCP_ACK_PACKET
    pings = link.up_kinds.get("ping", 0)
    batches = link.up_kinds.get("metrics_batch", 0)
    ping_cost = QUIC_DATA_OVERHEAD + len(encode(Ping(pings))) + QUIC_ACK_PACKET
    heartbeats = pings * ping_cost
    # Pings sent within a second after a batch: the session's "is the hub still there?"
    # probe fires although the batch's ack (due within ack_delay + RTT) would answer it.
    batch_times = [t for t, kind in link.up_times if kind == "metrics_batch"]
    probes = sum(
        1
        for t, kind in link.up_times
        if kind == "ping" and any(0 < t - b < 1.0 for b in batch_times)
    )
    return {
        "frames_bytes": sum(writes),
        "writes": len(writes),
        "ack_only_packets": link.up_acks,
        "pings": pings,
        "metrics_batches": batches,
        "frame_kinds": dict(sorted(link.up_kinds.items())),
        "uplink_kbit_s_quic": round(kbit_s(quic, hour), 4),
        "uplink_kbit_s_websocket_tcp": round(kbit_s(tcp, hour), 4),
        "heartbeats_only_kbit_s_quic": round(kbit_s(heartbeats, hour), 4),
        "pings_right_after_a_batch": probes,
        "uplink_kbit_s_quic_without_those": round(kbit_s(quic - probes * ping_cost, hour), 4),
        "hub_accepted_batches": hub.stats.accepted,
    }


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

    idle = simulate_idle_hour(hour)
    idle_bare = simulate_idle_hour(typical_node_samples(240, containers=0))
    idle_jetson = simulate_idle_hour(jetson_samples)
    idle_25 = simulate_idle_hour(hour, heartbeat_interval=25.0)

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
        "idle_hour_typical": idle,
        "idle_hour_no_containers": idle_bare,
        "idle_hour_jetson": idle_jetson,
        "idle_hour_typical_hub_heartbeat_25s": idle_25,
        "uplink_is": "estimate: real Session/codec/forwarder on a simulated link plus a "
        "per-packet overhead model (see bench_metrics.py); to be replaced by a "
        "measurement on real sockets",
        "scrape": scraped,
        "scrape_10k_nodes_s": round(scrape_10k, 3),
        "scrape_scaled_from_nodes": nodes,
    }
    return {
        "results": results,
        "goals": [
            {
                "id": "metrics.idle_uplink_kbit_s",
                "value": idle["uplink_kbit_s_quic"],
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
