"""Faults on a real network path: a hub in a network namespace, packets dropped by iptables.

- A peer that goes silent without closing (every packet dropped: no FIN, no RST) is
  detected within the liveness deadline, on both transports and by both ends.
- A ping in flight and a send stuck on a full window at the moment of the cut do not stop
  ``close()`` from returning within its bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from protocol import pki
from protocol.config import SessionConfig
from protocol.errors import ConnectionClosed
from protocol.events import PeerDead
from protocol.messages import KubeEvent, ObjectRef
from protocol.transport import Link, connect_quic, connect_websocket
from tests import netns
from tests.protocol.transport.conftest import TRANSPORTS, hello
from tests.waiting import eventually

ROOT = pathlib.Path(__file__).resolve().parents[3]
PING, LIVENESS = 0.5, 2.0
REF = ObjectRef(kind="Pod", namespace="default", name="web", uid="uid-1")

_reason = netns.available()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(_reason is not None, reason=f"network namespaces: {_reason}"),
]


@dataclass
class NetnsHub:
    topology: netns.Topology
    proc: asyncio.subprocess.Process
    ports: dict

    @property
    def ns(self) -> netns.NetNS:
        return self.topology.ns

    async def next_report(self, event: str, timeout: float) -> dict:
        assert self.proc.stdout is not None

        async def find() -> dict:
            while line := await self.proc.stdout.readline():
                report = json.loads(line)
                if report.get("event") == event:
                    return report
            raise AssertionError(f"the hub exited before reporting {event}")

        return await asyncio.wait_for(find(), timeout)


def write_certs(directory: pathlib.Path, pki_ca) -> None:
    (directory / "ca.pem").write_bytes(pki.dump_certificate_pem(pki_ca.ca.certificate))
    (directory / "server.pem").write_bytes(pki.dump_certificate_pem(pki_ca.server.chain))
    (directory / "server.key").write_bytes(pki.dump_private_key_pem(pki_ca.server.private_key))


@pytest.fixture
async def netns_hub(pki_ca, tmp_path) -> AsyncIterator[NetnsHub]:
    """A hub process inside a fresh namespace; namespace and rules removed afterwards."""
    write_certs(tmp_path, pki_ca)
    with netns.veth_namespace() as topology:
        argv = topology.ns.exec_argv(
            [
                sys.executable,
                "-m",
                "tests.protocol.transport.peer",
                str(tmp_path),
                topology.ns_addr,
                str(PING),
                str(LIVENESS),
            ]
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "the hub process exited before listening"
            yield NetnsHub(topology, proc, json.loads(line))
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()


CLIENT_CONFIG = SessionConfig(
    ping_interval=PING, liveness_timeout=LIVENESS, close_timeout=1.0, window=2
)


async def dial(transport: str, hub: NetnsHub, pki_ca) -> Link:
    connect = connect_quic if transport == "quic" else connect_websocket
    link = await connect(
        hub.topology.ns_addr,
        hub.ports[transport],
        credentials=pki_ca.client,
        hello=hello(),
        server_name="localhost",
        config=CLIENT_CONFIG,
        timeout=10.0,
    )
    await hub.next_report("open", 10)
    return link


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_silent_peer_is_detected_within_the_liveness_deadline(
    transport, netns_hub, pki_ca
) -> None:
    link = await dial(transport, netns_hub, pki_ca)
    loop = asyncio.get_running_loop()
    async with link:
        netns_hub.ns.partition()
        cut_at = loop.time()

        async def peer_dead() -> PeerDead:
            async for ev in link:
                if isinstance(ev, PeerDead):
                    return ev
            raise AssertionError(f"link ended with {link.close_event}, not PeerDead")

        dead = await asyncio.wait_for(peer_dead(), LIVENESS + 5)
        detected_after = loop.time() - cut_at
        # Silence is counted from the last packet received, which came at most one ping
        # interval before the cut; detection then takes at most the liveness timeout.
        assert detected_after <= LIVENESS + 1.0, detected_after
        assert dead.silent_for >= LIVENESS
        assert link.closed
        # The hub, on its side of the cut, found the agent dead too.
        report = await netns_hub.next_report("PeerDead", LIVENESS + 5)
        assert report["transport"] == transport
        assert report["silent_for"] >= LIVENESS


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_close_is_bounded_with_a_ping_in_flight_and_a_stuck_send(
    transport, netns_hub, pki_ca
) -> None:
    link = await dial(transport, netns_hub, pki_ca)
    loop = asyncio.get_running_loop()
    netns_hub.ns.partition()

    def event(i: int) -> KubeEvent:
        return KubeEvent(
            ref=REF, type="Normal", reason="Test", message=str(i), timestamp=0.0, count=1
        )

    # Fill the window (2): nothing can be acked through the cut, so the third send waits.
    await link.send(event(1))
    await link.send(event(2))
    stuck = asyncio.ensure_future(link.send(event(3)))
    # Wait until the client has pinged into the cut, so that a ping is in flight...
    pings = link.session.pings_sent
    await eventually(lambda: link.session.pings_sent != pings, "a ping into the cut", PING * 3)
    assert not stuck.done() and not link.closed
    started = loop.time()
    await asyncio.wait_for(link.close(), link.close_bound + 1.0)
    took = loop.time() - started
    assert took <= link.close_bound, took
    assert link.closed
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(stuck, 1.0)
    # Everything sent into the cut is still there for persistence and resend.
    assert [seq for seq, _ in link.session.unacked()] == [1, 2]
