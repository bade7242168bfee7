"""Protocol benchmark: our QUIC and WebSocket layers against the bare libraries.

For 1 KiB messages on loopback, with the far end in a separate process
(``tests/bench/protocol_peer.py``) and this process as the measured client:

- throughput: messages echoed per second with up to ``WINDOW`` messages in flight;
- latency: round-trip p50/p99 of one message at a time.

Bare and ours alternate over several rounds on the same connections and each keeps its best
round (the machine is shared; see :func:`compare`).

Four targets in the same run: an aioquic stream echo and a websockets echo (the bare
libraries, same TLS 1.3 certificates), and our QUIC and WebSocket transports (an agent's
``event`` answered by the hub with a ``twin_desired`` of the same text: framing, msgpack,
validation, sequence numbers, acks and the window all included).

Goals: ``protocol.overhead_ratio.quic`` and ``protocol.overhead_ratio.websocket`` =
bare msgs/s ÷ our msgs/s, at most 1.3.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

from protocol import pki
from protocol.messages import PROTOCOL_VERSION, Hello, KubeEvent, ObjectRef
from protocol.session import MessageReceived
from protocol.transport import Link, connect_quic, connect_websocket
from protocol.transport.tls import client_ssl_context
from tests.bench.bare_echo import BareQuicClient, BareWebSocketClient
from tests.testpki import make_test_pki

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
HOST = "127.0.0.1"
SIZE = 1024
WINDOW = 64
TARGET = 1.3


def write_server_certs(directory: pathlib.Path, test_pki) -> None:
    (directory / "ca.pem").write_bytes(pki.dump_certificate_pem(test_pki.ca.certificate))
    (directory / "server.pem").write_bytes(pki.dump_certificate_pem(test_pki.server.chain))
    key = directory / "server.key"
    key.write_bytes(pki.dump_private_key_pem(test_pki.server.private_key))
    key.chmod(0o600)


async def start_peer(cert_dir: pathlib.Path) -> tuple[asyncio.subprocess.Process, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bench.protocol_peer",
        str(cert_dir),
        HOST,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line:
        raise RuntimeError("the benchmark peer exited before listening")
    return proc, json.loads(line)


async def stop_peer(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (seconds)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    send: Callable[[], Awaitable[None]],
    recv: Callable[[], Awaitable[None]],
    count: int,
    rounds: int,
    peer_pid: int | None = None,
) -> dict:
    """Throughput with WINDOW in flight, then ``rounds`` sequential round trips.

    Also the CPU time both processes spent per message during the throughput phase
    (``cpu_us_per_msg``): unlike wall time, it barely moves when other work shares the
    machine, so its ratio is the steadier view of our layer's cost.
    """
    credit = asyncio.Semaphore(WINDOW)
    cpu0 = time.process_time() + (process_cpu_seconds(peer_pid) if peer_pid else 0.0)

    async def sender() -> None:
        for _ in range(count):
            await credit.acquire()
            await send()

    start = time.perf_counter()
    task = asyncio.get_running_loop().create_task(sender())
    for _ in range(count):
        await recv()
        credit.release()
    elapsed = time.perf_counter() - start
    await task
    cpu = time.process_time() + (process_cpu_seconds(peer_pid) if peer_pid else 0.0) - cpu0
    rtts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await send()
        await recv()
        rtts.append(time.perf_counter() - t0)
    rtts.sort()
    return {
        "msgs_per_s": round(count / elapsed),
        "cpu_us_per_msg": round(cpu / count * 1e6, 1),
        "rtt_p50_ms": round(statistics.median(rtts) * 1000, 3),
        "rtt_p99_ms": round(rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1000, 3),
    }


Pair = tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]


async def bare_quic(port: int, test_pki) -> tuple[Pair, Callable[[], Awaitable[None]]]:
    client = BareQuicClient(HOST, port, test_pki.server)
    await client.open()
    payload = b"x" * SIZE

    async def send() -> None:
        client.writer.write(payload)

    async def recv() -> None:
        await client.reader.readexactly(SIZE)

    return (send, recv), client.close


async def bare_websocket(port: int, test_pki) -> tuple[Pair, Callable[[], Awaitable[None]]]:
    client = BareWebSocketClient(HOST, port, client_ssl_context(test_pki.client))
    await client.open()
    payload = b"x" * SIZE

    async def send() -> None:
        await client.ws.send(payload)

    async def recv() -> None:
        await client.ws.recv()

    return (send, recv), client.close


def ours(link: Link) -> tuple[Pair, Callable[[], Awaitable[None]]]:
    ref = ObjectRef(kind="Pod", namespace="default", name="bench", uid="bench-uid")
    text = "x" * SIZE
    events = link.__aiter__()

    async def send() -> None:
        await link.send(
            KubeEvent(ref=ref, type="Normal", reason="Bench", message=text, timestamp=0.0, count=1)
        )

    async def recv() -> None:
        while not isinstance(await events.__anext__(), MessageReceived):
            pass

    return (send, recv), link.close


async def compare(
    bare: Pair, our: Pair, count: int, rounds: int, repeats: int, peer_pid: int
) -> dict:
    """Alternate bare and ours ``repeats`` times; keep each side's best round.

    The machine is shared and noisy: interleaving exposes both sides to the same load,
    and the best of several rounds is the least disturbed measurement of each.
    """
    runs: dict[str, list[dict]] = {"bare": [], "ours": []}
    for _ in range(repeats):
        runs["bare"].append(await measure(*bare, count, rounds, peer_pid))
        runs["ours"].append(await measure(*our, count, rounds, peer_pid))
    best = {}
    for side, results in runs.items():
        top = max(results, key=lambda r: r["msgs_per_s"])
        best[side] = {
            **top,
            "rtt_p50_ms": min(r["rtt_p50_ms"] for r in results),
            "rtt_p99_ms": min(r["rtt_p99_ms"] for r in results),
            "cpu_us_per_msg": min(r["cpu_us_per_msg"] for r in results),
            "msgs_per_s_all": [r["msgs_per_s"] for r in results],
        }
    return best


def hello() -> Hello:
    return Hello(
        min_version=PROTOCOL_VERSION,
        max_version=PROTOCOL_VERSION,
        node_name="edge-1",
        agent_version="bench",
    )


async def run_async(quick: bool) -> dict:
    count, rounds, repeats = (1000, 100, 3) if quick else (5000, 500, 5)
    test_pki = make_test_pki()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = pathlib.Path(tmp)
        write_server_certs(cert_dir, test_pki)
        proc, ports = await start_peer(cert_dir)
        try:
            common = {"credentials": test_pki.client, "hello": hello(), "server_name": "localhost"}
            for name, open_bare, connect in (
                ("quic", bare_quic, connect_quic),
                ("websocket", bare_websocket, connect_websocket),
            ):
                bare, close_bare = await open_bare(ports[f"bare_{name}"], test_pki)
                our, close_ours = ours(await connect(HOST, ports[name], **common))
                try:
                    best = await compare(bare, our, count, rounds, repeats, proc.pid)
                finally:
                    await close_bare()
                    await close_ours()
                results[f"bare_{name}"] = best["bare"]
                results[name] = best["ours"]
        finally:
            await stop_peer(proc)
    results["messages_per_round"] = count
    results["rounds"] = repeats
    results["message_size_bytes"] = SIZE
    results["window"] = WINDOW
    return results


def run(quick: bool) -> dict:
    results = asyncio.run(run_async(quick))
    goals = []
    for transport in ("quic", "websocket"):
        ratio = results[f"bare_{transport}"]["msgs_per_s"] / results[transport]["msgs_per_s"]
        results[f"overhead_ratio_{transport}"] = round(ratio, 3)
        results[f"cpu_ratio_{transport}"] = round(
            results[transport]["cpu_us_per_msg"] / results[f"bare_{transport}"]["cpu_us_per_msg"], 3
        )
        goals.append(
            {
                "id": f"protocol.overhead_ratio.{transport}",
                "value": round(ratio, 3),
                "target": TARGET,
                "unit": "ratio",
                "op": "<=",
            }
        )
    return {"results": results, "goals": goals}
