"""Transport memory: hub-side RSS per idle connection, for our QUIC and WebSocket servers.

The server is ``tests/bench/protocol_peer.py`` in its own process; this process opens
``N`` sessions (1,000; 100 with ``--quick``) to each of our servers, established (hello and
welcome exchanged) and idle, and reads the server's RSS before and after. The figure is
(RSS after - RSS before) / N, after a warm-up batch so that one-time allocations (imports,
caches, the first TLS handshake) are not counted. The full run also measures the bare
websockets server (``ssl=`` handed to asyncio) for comparison.

Goals (the hub's budget, DESIGN.md): ≤ 64 KiB per WebSocket session, ≤ 128 KiB per QUIC
session.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import tempfile

from websockets.asyncio.client import connect as ws_connect

from protocol.transport import connect_quic, connect_websocket
from protocol.transport.tls import client_ssl_context
from tests.bench.bench_protocol import HOST, hello, start_peer, stop_peer, write_server_certs
from tests.testpki import make_test_pki

WARMUP = 50
BATCH = 25
GOALS = {"websocket": 64, "quic": 128, "bare_websocket": None}


async def peer_rss(proc: asyncio.subprocess.Process) -> dict:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"rss\n")
    await proc.stdin.drain()
    return json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))


async def per_connection(proc, open_one, close_one, n: int) -> dict:
    held = [await open_one() for _ in range(WARMUP)]
    await asyncio.sleep(0.5)
    before = await peer_rss(proc)
    for _ in range(0, n, BATCH):
        held.extend(await asyncio.gather(*(open_one() for _ in range(BATCH))))
    await asyncio.sleep(1.0)
    after = await peer_rss(proc)
    await asyncio.gather(*(close_one(c) for c in held))
    return {
        "connections": n,
        "rss_before_kib": before["rss_kib"],
        "rss_after_kib": after["rss_kib"],
        "kib_per_connection": round((after["rss_kib"] - before["rss_kib"]) / n, 1),
    }


async def run_async(quick: bool) -> dict:
    n = 100 if quick else 1000
    pki_ca = make_test_pki()
    # Generous timeouts: 50 handshakes at once on a shared 2-core machine are slow.
    common = {
        "credentials": pki_ca.client,
        "hello": hello(),
        "server_name": "localhost",
        "timeout": 60.0,
    }
    results = {}
    context = client_ssl_context(pki_ca.client)

    async def bare(port: int) -> object:
        return await ws_connect(
            f"wss://{HOST}:{port}/",
            ssl=context,
            server_hostname="localhost",
            ping_interval=None,
            compression=None,
            open_timeout=60,
        )

    async def close_link(link) -> None:
        await link.close()

    async def close_bare(ws) -> None:
        await ws.close()

    openers = {
        "websocket": (lambda port: connect_websocket(HOST, port, **common), close_link),
        "quic": (lambda port: connect_quic(HOST, port, **common), close_link),
        "bare_websocket": (bare, close_bare),
    }
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = pathlib.Path(tmp)
        write_server_certs(cert_dir, pki_ca)
        for name, (open_one, close_one) in openers.items():
            if quick and name == "bare_websocket":
                continue
            # A fresh server process per kind: memory freed by one kind must not be
            # reused by the next and make it look cheaper.
            proc, ports = await start_peer(cert_dir)
            try:
                port = ports[name]
                results[name] = await per_connection(
                    proc, lambda port=port, open_one=open_one: open_one(port), close_one, n
                )
            finally:
                await stop_peer(proc)
    return results


def run(quick: bool) -> dict:
    results = asyncio.run(run_async(quick))
    goals = [
        {
            "id": f"transport.rss_per_connection.{name}",
            "value": results[name]["kib_per_connection"],
            "target": target,
            "unit": "KiB",
            "op": "<=",
        }
        for name, target in GOALS.items()
        if target is not None
    ]
    return {"results": results, "goals": goals}
