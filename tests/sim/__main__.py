"""Run simulated agents in their own process (benchmarks): ``python -m tests.sim --help``.

Each agent gets a fresh key and a node certificate signed with the CA key given (the hub
must trust that CA). Agents start at ``--ramp`` per second, so that a fleet does not hit
the hub's listen backlog all at once, then stay connected until SIGTERM, SIGINT or the end
of stdin (the parent closing the pipe). Every ``--report-interval`` seconds one JSON line
goes to stdout::

    {"t": 12.5, "agents": 1000, "connected": 998, "synced": 998, "sessions": 1003,
     "objects": 2000, "errors": 0, "latencies_ms": [12.1, 9.8]}

``latencies_ms`` are the delivery latencies measured since the previous line (pods
annotated with ``sim.edgefleet.io/created-at``, see :mod:`tests.sim.agent`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time

from protocol import pki
from protocol.config import SessionConfig
from tests.sim.agent import SimAgent
from tests.sim.fleet import node_credentials


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="hub address (default 127.0.0.1)")
    p.add_argument("--quic-port", type=int, default=7443, help="hub UDP port (default 7443)")
    p.add_argument("--websocket-port", type=int, default=7443, help="hub TCP port (7443)")
    p.add_argument("--transport", choices=("quic", "websocket"), default="websocket")
    p.add_argument("--ca-cert", required=True, help="PEM file of the hub CA certificate")
    p.add_argument("--ca-key", required=True, help="PEM file of the hub CA private key")
    p.add_argument("--nodes", type=int, default=1, help="how many agents (default 1)")
    p.add_argument("--prefix", default="sim-", help="node name prefix (default sim-)")
    p.add_argument("--start-index", type=int, default=0, help="first node number (default 0)")
    p.add_argument("--ramp", type=float, default=200.0, help="agents started per second (200)")
    p.add_argument(
        "--report-interval", type=float, default=1.0, help="seconds between JSON lines (1)"
    )
    p.add_argument(
        "--no-status", action="store_true", help="do not report pod status (idle agents)"
    )
    p.add_argument(
        "--ping-interval", type=float, default=20.0, help="session ping interval, s (20)"
    )
    return p.parse_args(argv)


def load_ca(args: argparse.Namespace) -> pki.CertificateAuthority:
    with open(args.ca_cert, "rb") as f:
        ca_cert = pki.load_certificate_pem(f.read())
    with open(args.ca_key, "rb") as f:
        ca_key = pki.load_private_key_pem(f.read())
    return pki.CertificateAuthority(ca_cert, ca_key)


async def run(args: argparse.Namespace, ca: pki.CertificateAuthority) -> int:
    config = SessionConfig(
        ping_interval=args.ping_interval, liveness_timeout=max(60.0, 3 * args.ping_interval)
    )
    agents = [
        SimAgent(
            f"{args.prefix}{i}",
            node_credentials(ca, f"{args.prefix}{i}"),
            host=args.host,
            quic_port=args.quic_port,
            websocket_port=args.websocket_port,
            transport=args.transport,
            auto_status=not args.no_status,
            config=config,
            backoff_base=0.5,
            backoff_cap=10.0,
            connect_timeout=30.0,
        )
        for i in range(args.start_index, args.start_index + args.nodes)
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.read(1) else None)
    started = time.monotonic()

    async def ramp() -> None:
        for i, agent in enumerate(agents):
            agent.start()
            delay = started + (i + 1) / args.ramp - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    seen = [0] * len(agents)

    def report() -> None:
        latencies = []
        for i, agent in enumerate(agents):
            latencies += agent.latencies[seen[i] :]
            seen[i] = len(agent.latencies)
        line = {
            "t": round(time.monotonic() - started, 3),
            "agents": len(agents),
            "connected": sum(a.connected for a in agents),
            "synced": sum(a.synced for a in agents),
            "sessions": sum(a.sessions for a in agents),
            "objects": sum(len(a.store) for a in agents),
            "errors": sum(len(a.errors) for a in agents),
            "latencies_ms": [round(x * 1000, 2) for x in latencies],
        }
        print(json.dumps(line), flush=True)

    ramping = asyncio.ensure_future(ramp())
    try:
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), args.report_interval)
            report()
    finally:
        ramping.cancel()
        await asyncio.gather(ramping, return_exceptions=True)
        await asyncio.gather(*(a.stop() for a in agents), return_exceptions=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    return asyncio.run(run(args, load_ca(args)))


if __name__ == "__main__":
    sys.exit(main())
