"""The far end of the protocol benchmark, run in its own process.

Usage: ``python -m tests.bench.protocol_peer CERT_DIR [HOST]``

Starts four echo servers on HOST (default 127.0.0.1) with the hub certificate in CERT_DIR
(``ca.pem``, ``server.pem``, ``server.key``), prints one JSON line with their ports, and
runs until its standard input closes:

- ``bare_quic``: an aioquic stream echo (aioquic's own asyncio API);
- ``bare_websocket``: a websockets echo (``ssl=`` handed to asyncio, as usual);
- ``quic`` / ``websocket``: our transports; every ``event`` message from the agent is
  answered with a ``twin_desired`` carrying the same text (our layer's echo).

Also answers ``rss`` on standard input with its resident set size in KiB (after a
garbage collection) and the number of connections it holds, for the memory benchmark.
"""

from __future__ import annotations

import asyncio
import gc
import json
import pathlib
import sys
import time

from protocol.events import MessageReceived
from protocol.messages import PROTOCOL_VERSION, KubeEvent, TwinDesired, Welcome
from protocol.transport import Link, TLSCredentials, serve_quic, serve_websocket
from protocol.transport.tls import server_ssl_context
from tests.bench.bare_echo import serve_bare_quic, serve_bare_websocket


def load_server_credentials(cert_dir: pathlib.Path) -> TLSCredentials:
    return TLSCredentials.from_pem(
        (cert_dir / "ca.pem").read_bytes(),
        (cert_dir / "server.pem").read_bytes(),
        (cert_dir / "server.key").read_bytes(),
    )


def rss_kib() -> int:
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def echo(link: Link) -> None:
    """Our layer's echo: accept the hello, answer each event with a twin_desired."""
    link.accept(
        Welcome(
            version=link.version,
            hub_time=time.time(),
            session_id="bench",
            received_up_to=0,
            heartbeat_interval=20.0,
        )
    )
    async for event in link:
        if isinstance(event, MessageReceived) and isinstance(event.message, KubeEvent):
            await link.send(
                TwinDesired(
                    ref=event.message.ref, version=1, properties={"p": event.message.message}
                )
            )


async def main(cert_dir: pathlib.Path, host: str) -> None:
    credentials = load_server_credentials(cert_dir)
    bare_quic, bare_quic_port = await serve_bare_quic(host, credentials)
    bare_ws, bare_ws_port = await serve_bare_websocket(host, server_ssl_context(credentials))
    quic = await serve_quic(echo, host, 0, credentials=credentials)
    ws = await serve_websocket(echo, host, 0, credentials=credentials, backlog=4096)
    print(
        json.dumps(
            {
                "bare_quic": bare_quic_port,
                "bare_websocket": bare_ws_port,
                "quic": quic.port,
                "websocket": ws.port,
                "protocol_version": PROTOCOL_VERSION,
            }
        ),
        flush=True,
    )
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := await reader.readline():
            if line.strip() == b"rss":
                print(
                    json.dumps(
                        {
                            "rss_kib": rss_kib(),
                            "quic": quic.connections,
                            "websocket": ws.connections,
                        }
                    ),
                    flush=True,
                )
    finally:
        await quic.aclose()
        await ws.aclose()
        bare_ws.close()
        bare_quic.close()


if __name__ == "__main__":
    asyncio.run(main(pathlib.Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"))
