"""A hub for fault tests, run in its own process (typically inside a network namespace).

Usage: ``python -m tests.protocol.transport.peer CERT_DIR HOST PING_INTERVAL LIVENESS``

Serves QUIC and WebSocket on HOST with the hub certificate from CERT_DIR, accepts every
hello, echoes every ``event`` back as a ``twin_desired``, and reports on standard output,
one JSON object per line: first ``{"quic": port, "websocket": port}``, then
``{"event": "open", "transport": ..}`` per accepted link and, when a link ends,
``{"event": "PeerDead"|"Closed", "transport": .., "silent_for"|"code": ..}``. Exits when
standard input closes.
"""

from __future__ import annotations

import asyncio
import json
import sys

from protocol.config import SessionConfig
from protocol.events import Closed, MessageReceived, PeerDead
from protocol.messages import KubeEvent, TwinDesired
from protocol.transport import Link, serve_quic, serve_websocket
from tests.bench.protocol_peer import load_server_credentials
from tests.protocol.transport.conftest import welcome


def report(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def handler(link: Link) -> None:
    link.accept(welcome(link))
    report(event="open", transport=link.transport)
    async for ev in link:
        if isinstance(ev, MessageReceived) and isinstance(ev.message, KubeEvent):
            await link.send(
                TwinDesired(ref=ev.message.ref, version=1, properties={"p": ev.message.message})
            )
        elif isinstance(ev, PeerDead):
            report(event="PeerDead", transport=link.transport, silent_for=ev.silent_for)
        elif isinstance(ev, Closed):
            report(event="Closed", transport=link.transport, code=int(ev.code), reason=ev.reason)


async def main(cert_dir: str, host: str, ping: float, liveness: float) -> None:
    import pathlib

    credentials = load_server_credentials(pathlib.Path(cert_dir))
    config = SessionConfig(ping_interval=ping, liveness_timeout=liveness, close_timeout=1.0)
    quic = await serve_quic(handler, host, 0, credentials=credentials, config=config)
    ws = await serve_websocket(handler, host, 0, credentials=credentials, config=config)
    report(quic=quic.port, websocket=ws.port)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        await reader.read()
    finally:
        await quic.aclose()
        await ws.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])))
