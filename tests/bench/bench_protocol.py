"""Protocol benchmark: our QUIC and WebSocket layers against the bare libraries.

For 1 KiB messages on loopback, with the far end in a separate process
(``tests/bench/protocol_peer.py``) and this process as the measured client:

- throughput: messages echoed per second with up to ``WINDOW`` messages in flight;
- latency: round-trip p50/p99 of one message at a time.

Bare and ours alternate over several rounds on the same connections and each keeps its best
round (the machine is shared; see :func:`compare`).

Four targets in the same run: an aioquic stream echo and a websockets echo (the bare
libraries through their own asyncio APIs, same TLS 1.3 certificates), and our QUIC and
WebSocket transports (an agent's ``event`` answered by the hub with a ``twin_desired`` of
the same text: message objects and their validation, framing, msgpack, sequence numbers,
acks and the window all included).

Fair by construction: the same 1 KiB of application payload (bare: 1,024 bytes; ours: a
1,024-character event text, so our frames are ~1,130-1,170 bytes and the envelope counts as
our cost), the same number in flight (``WINDOW``) for both, the far end in its own process
for both, both measured on the same connections in alternating rounds. Each side uses its
library the natural way: the bare websockets echo sends one WebSocket message per message;
our adapter puts the frames ready in one loop iteration in one message, which is part of
what is measured.

Reported beside the msgs/s figures: CPU time per message of this process (the client) and
of the peer (``cpu_us_per_msg`` is their sum), whose ratio is steadier than wall time on a
shared machine. For a deterministic view, ``python -m tests.bench.bench_protocol
--instructions`` counts the client's (or the peer's) instructions per message with
callgrind (see :func:`instructions_main`).

Goals: ``protocol.overhead_ratio.quic`` and ``protocol.overhead_ratio.websocket`` =
bare msgs/s ÷ our msgs/s, at most 1.3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Awaitable, Callable

from protocol import pki
from protocol.events import MessageReceived
from protocol.messages import PROTOCOL_VERSION, Hello, KubeEvent, ObjectRef
from protocol.transport import Link, TLSCredentials, connect_quic, connect_websocket
from protocol.transport.tls import client_ssl_context
from tests.bench.bare_echo import BareQuicClient, BareWebSocketClient
from tests.testpki import make_test_pki

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
HOST = "127.0.0.1"
SIZE = 1024
WINDOW = 64
TARGET = 1.3


def write_server_certs(directory: pathlib.Path, pki_ca) -> None:
    (directory / "ca.pem").write_bytes(pki.dump_certificate_pem(pki_ca.ca.certificate))
    (directory / "server.pem").write_bytes(pki.dump_certificate_pem(pki_ca.server.chain))
    key = directory / "server.key"
    key.write_bytes(pki.dump_private_key_pem(pki_ca.server.private_key))
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
    client0 = time.process_time()
    peer0 = process_cpu_seconds(peer_pid) if peer_pid else 0.0

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
    client_cpu = time.process_time() - client0
    peer_cpu = (process_cpu_seconds(peer_pid) if peer_pid else 0.0) - peer0
    rtts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await send()
        await recv()
        rtts.append(time.perf_counter() - t0)
    rtts.sort()
    return {
        "msgs_per_s": round(count / elapsed),
        "cpu_us_per_msg": round((client_cpu + peer_cpu) / count * 1e6, 1),
        "client_cpu_us_per_msg": round(client_cpu / count * 1e6, 1),
        "peer_cpu_us_per_msg": round(peer_cpu / count * 1e6, 1),
        "rtt_p50_ms": round(statistics.median(rtts) * 1000, 3),
        "rtt_p99_ms": round(rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1000, 3),
    }


Pair = tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]


async def bare_quic(port: int, pki_ca) -> tuple[Pair, Callable[[], Awaitable[None]]]:
    client = BareQuicClient(HOST, port, pki_ca.server)
    await client.open()
    payload = b"x" * SIZE

    async def send() -> None:
        client.writer.write(payload)

    async def recv() -> None:
        await client.reader.readexactly(SIZE)

    return (send, recv), client.close


async def bare_websocket(port: int, pki_ca) -> tuple[Pair, Callable[[], Awaitable[None]]]:
    client = BareWebSocketClient(HOST, port, client_ssl_context(pki_ca.client))
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
            "client_cpu_us_per_msg": min(r["client_cpu_us_per_msg"] for r in results),
            "peer_cpu_us_per_msg": min(r["peer_cpu_us_per_msg"] for r in results),
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
    # (messages per round, sequential round trips, rounds) per transport. QUIC is ~10x
    # slower per message (aioquic is pure Python): shorter rounds, so that each round fits
    # in a quiet stretch of a shared machine, and more of them to find one.
    plans = (
        {"quic": (500, 50, 3), "websocket": (1000, 100, 3)}
        if quick
        else {"quic": (2000, 200, 9), "websocket": (5000, 500, 9)}
    )
    pki_ca = make_test_pki()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = pathlib.Path(tmp)
        write_server_certs(cert_dir, pki_ca)
        proc, ports = await start_peer(cert_dir)
        try:
            common = {"credentials": pki_ca.client, "hello": hello(), "server_name": "localhost"}
            for name, open_bare, connect in (
                ("quic", bare_quic, connect_quic),
                ("websocket", bare_websocket, connect_websocket),
            ):
                bare, close_bare = await open_bare(ports[f"bare_{name}"], pki_ca)
                our, close_ours = ours(await connect(HOST, ports[name], **common))
                count, rounds, repeats = plans[name]
                try:
                    best = await compare(bare, our, count, rounds, repeats, proc.pid)
                finally:
                    await close_bare()
                    await close_ours()
                results[f"bare_{name}"] = best["bare"]
                results[name] = best["ours"]
                results[f"messages_per_round_{name}"] = count
                results[f"rounds_{name}"] = repeats
        finally:
            await stop_peer(proc)
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


# -- instruction counts (callgrind): deterministic where wall and CPU time are not --------------

TARGETS = ("bare_websocket", "websocket", "bare_quic", "quic")


async def client_loop(target: str, count: int, depth: int, ports: dict, cert_dir: str) -> None:
    """Echo ``count`` messages with ``depth`` in flight against the peer (the measured run)."""
    d = pathlib.Path(cert_dir)
    creds = TLSCredentials.from_pem(
        (d / "ca.pem").read_bytes(),
        (d / "client.pem").read_bytes(),
        (d / "client.key").read_bytes(),
    )
    material = types.SimpleNamespace(client=creds, server=creds)
    common = {"credentials": creds, "hello": hello(), "server_name": "localhost", "timeout": 60.0}
    if target == "bare_websocket":
        (send, recv), close = await bare_websocket(ports[target], material)
    elif target == "bare_quic":
        (send, recv), close = await bare_quic(ports[target], material)
    else:
        connect = connect_websocket if target == "websocket" else connect_quic
        (send, recv), close = ours(await connect(HOST, ports[target], **common))
    credit = asyncio.Semaphore(depth)

    async def sender() -> None:
        for _ in range(count):
            await credit.acquire()
            await send()

    task = asyncio.get_running_loop().create_task(sender())
    for _ in range(count):
        await recv()
        credit.release()
    await task
    await close()


def _callgrind_total(stderr: str) -> int:
    found = re.findall(r"Collected : (\d+)", stderr)
    if not found:
        raise RuntimeError(f"no callgrind total in:\n{stderr[-2000:]}")
    return int(found[-1])


def instruction_counts(
    targets: tuple[str, ...], depth: int, counts: tuple[int, int], side: str
) -> dict:
    """Instructions per echoed message of the client (or the peer) process, per target.

    Runs each target twice, echoing ``counts[0]`` then ``counts[1]`` messages, with one of
    the two processes under ``valgrind --tool=callgrind``; the difference of the totals
    divided by the difference of the counts removes start-up, imports and handshakes.
    Instruction counts do not depend on the machine's load; they do not count the kernel
    (syscalls), and the process under valgrind runs ~50x slower, so with ``depth`` > 1 the
    other process batches differently than it would natively.
    """
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    pki_ca = make_test_pki()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = pathlib.Path(tmp)
        write_server_certs(cert_dir, pki_ca)
        (cert_dir / "client.pem").write_bytes(pki.dump_certificate_pem(pki_ca.client.chain))
        (cert_dir / "client.key").write_bytes(pki.dump_private_key_pem(pki_ca.client.private_key))
        for target in targets:
            totals = []
            for count in counts:
                peer_cmd = [sys.executable, "-m", "tests.bench.protocol_peer", str(cert_dir), HOST]
                peer = subprocess.Popen(
                    (valgrind if side == "peer" else []) + peer_cmd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=ROOT,
                    env=env,
                    text=True,
                )
                assert peer.stdout is not None
                ports = peer.stdout.readline().strip()
                client_cmd = [sys.executable, "-m", "tests.bench.bench_protocol", "--client-loop"]
                client_cmd += [target, str(count), str(depth), ports, str(cert_dir)]
                client = subprocess.run(
                    (valgrind if side == "client" else []) + client_cmd,
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    env=env,
                )
                _, peer_err = peer.communicate(input="", timeout=600)
                if client.returncode:
                    raise RuntimeError(f"{target}: client failed:\n{client.stderr[-3000:]}")
                totals.append(_callgrind_total(client.stderr if side == "client" else peer_err))
            out[target] = round((totals[1] - totals[0]) / (counts[1] - counts[0]))
    return out


def instructions_main(argv: list[str]) -> int:
    """``python -m tests.bench.bench_protocol --instructions [--depth N] ...``: print JSON."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_protocol")
    parser.add_argument("--instructions", action="store_true", required=True)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--depth", type=int, default=WINDOW, help="messages in flight")
    parser.add_argument("--messages", default="200,1200", help="the two run lengths, N1,N2")
    parser.add_argument("--side", choices=("client", "peer"), default="client")
    args = parser.parse_args(argv)
    n1, n2 = (int(x) for x in args.messages.split(","))
    targets = tuple(args.targets.split(","))
    per_msg = instruction_counts(targets, args.depth, (n1, n2), args.side)
    result: dict = {"side": args.side, "depth": args.depth, "instructions_per_msg": per_msg}
    for transport in ("quic", "websocket"):
        if transport in per_msg and f"bare_{transport}" in per_msg:
            result[f"ratio_{transport}"] = round(
                per_msg[transport] / per_msg[f"bare_{transport}"], 3
            )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client-loop"]:
        target, count, depth, ports, cert_dir = sys.argv[2:7]
        asyncio.run(client_loop(target, int(count), int(depth), json.loads(ports), cert_dir))
    else:
        sys.exit(instructions_main(sys.argv[1:]))
