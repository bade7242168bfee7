"""Benchmark of the sans-I/O protocol core: messages per second and bytes per session.

No network: a client and a server ``Session`` pump 1 KiB messages to each other in one
process (encode, frame, decode, validate, deliver, ack), timed with the process CPU clock
(best of several runs, so other load on the machine disturbs it less). Reference: bare
``msgpack.packb`` + ``unpackb`` of the same envelope, so the layer's own cost shows as a
ratio. Memory: ``tracemalloc`` bytes per open, idle ``Session`` (what the hub holds per
node besides TLS).

Goals:
- ``protocol_core.msgs_per_s``: >= 100,000 MetricsBatch messages of 1 KiB per second, one
  frame per ``receive_data()`` call (the unbatched WebSocket case), both ends on one core.
  At that rate the core costs <= 10 us per message end to end.
- ``protocol_core.idle_session_bytes``: <= 4,096 bytes per idle server session, a small
  part of the 64 KiB per node the hub may spend at 10,000 nodes (TLS takes the most).
"""

from __future__ import annotations

import gc
import time
import tracemalloc

import msgpack

from protocol import (
    MetricsBatch,
    ObjectRef,
    ObjectUpsert,
    PodStatus,
    Role,
    Session,
    SessionConfig,
    encode,
)
from tests.protocol.helpers import ConnectionPair

BLOB = "x" * 1000
POD = ObjectRef("Pod", "default", "web-0", "7d3c0d5e-pod")


def _open_pair() -> ConnectionPair:
    pair = ConnectionPair()
    pair.handshake()
    pair.take(pair.client)
    pair.take(pair.server)
    return pair


def _edge_to_hub(message, n: int, batch: int) -> float:
    """Messages/s: the client sends ``batch`` at a time, the server receives them in one call
    each (batch=1: one frame per call) or all in one call; acks flow back."""
    pair = _open_pair()
    client, server = pair.client, pair.server
    now = 1.0
    sent = delivered = 0
    start = time.process_time()
    while sent < n:
        for _ in range(batch):
            client.send(message, now)
        sent += batch
        if batch == 1:
            for frame in client.frames_to_send():
                server.receive_data(frame, now)
        else:
            server.receive_data(client.data_to_send(), now)
        delivered += len(server.events_received())
        server.handle_timer(now)
        back = server.data_to_send()
        if back:
            client.receive_data(back, now)
            client.events_received()
        now += 1e-4
    elapsed = time.process_time() - start
    assert delivered == sent, (delivered, sent)
    return sent / elapsed


def _hub_to_edge(message, n: int) -> float:
    pair = _open_pair()
    client, server = pair.client, pair.server
    now = 1.0
    start = time.process_time()
    for _ in range(n):
        server.send(message, now)
        for frame in server.frames_to_send():
            client.receive_data(frame, now)
        client.events_received()
    return n / (time.process_time() - start)


def _bare_msgpack(message, n: int) -> float:
    envelope = msgpack.unpackb(encode(message, 1)[4:])  # the same map our frames carry
    start = time.process_time()
    for _ in range(n):
        msgpack.unpackb(msgpack.packb(envelope))
    return n / (time.process_time() - start)


def _session_bytes(count: int) -> dict[str, float]:
    """tracemalloc bytes per session: fresh, and open after some traffic (buffers drained)."""
    out = {}
    for label in ("fresh_server", "open_server", "open_client"):
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = []
        for _ in range(count):
            if label == "fresh_server":
                kept.append(Session(Role.SERVER, SessionConfig(), now=0.0))
                continue
            pair = _open_pair()
            pair.client.send(PodStatus(POD, {"phase": "Running"}, 1.0), pair.now)
            pair.pump()
            pair.run_until(pair.now + 1.0)  # the ack went back, nothing is pending
            pair.take(pair.client)
            pair.take(pair.server)
            kept.append(pair.server if label == "open_server" else pair.client)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        out[label] = round((after - before) / count, 1)
    return out


def run(quick: bool) -> dict:
    n, repeats, sessions = (5_000, 2, 200) if quick else (50_000, 5, 2_000)
    metrics = MetricsBatch("edge-1", {"blob": [BLOB]})
    status = PodStatus(POD, {"phase": "Running", "message": BLOB[:960]}, 1.0)
    upsert = ObjectUpsert(POD, "1", {"data": BLOB})

    def best(fn, *args) -> float:
        return round(max(fn(*args) for _ in range(repeats)))

    results = {
        "frame_bytes": {
            "metrics_batch": len(encode(metrics, 1)),
            "pod_status": len(encode(status, 1)),
            "object_upsert": len(encode(upsert)),
        },
        "msgs_per_s": {
            "metrics_batch_one_frame_per_call": best(_edge_to_hub, metrics, n, 1),
            "metrics_batch_64_per_call": best(_edge_to_hub, metrics, n, 64),
            "pod_status_one_frame_per_call": best(_edge_to_hub, status, n, 1),
            "object_upsert_hub_to_edge": best(_hub_to_edge, upsert, n),
            "bare_msgpack_pack_unpack": best(_bare_msgpack, metrics, n),
        },
        "session_bytes": _session_bytes(sessions),
    }
    rate = results["msgs_per_s"]
    results["us_per_msg_metrics_batch"] = round(1e6 / rate["metrics_batch_one_frame_per_call"], 2)
    results["cost_vs_bare_msgpack"] = round(
        rate["bare_msgpack_pack_unpack"] / rate["metrics_batch_one_frame_per_call"], 2
    )
    return {
        "results": results,
        "goals": [
            {
                "id": "protocol_core.msgs_per_s",
                "value": rate["metrics_batch_one_frame_per_call"],
                "target": 100_000,
                "unit": "messages/s",
                "op": ">=",
            },
            {
                "id": "protocol_core.idle_session_bytes",
                "value": results["session_bytes"]["open_server"],
                "target": 4096,
                "unit": "bytes",
                "op": "<=",
            },
        ],
    }
