"""The uplink dialer: QUIC first, WebSocket fallback, back to QUIC, backoff, bounded close.

Real transports and certificates: the hub's QUIC port is first a UDP socket that never
answers (or, in the network-namespace test, UDP to the hub is dropped by iptables), then a
real QUIC server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import socket
import sys
import time

import pytest

from edgeagent.uplink.dialer import QUIC, WEBSOCKET, Uplink, UplinkSettings
from protocol import pki
from protocol.errors import CloseCode
from protocol.messages import PROTOCOL_VERSION, Hello, Welcome
from protocol.transport import Link, serve_quic, serve_websocket
from tests import netns
from tests.testpki import TestPKI

ROOT = pathlib.Path(__file__).resolve().parents[3]
QUIC_TIMEOUT = 1.0
RETRY = 2.0


def hello() -> Hello:
    return Hello(
        min_version=PROTOCOL_VERSION,
        max_version=PROTOCOL_VERSION,
        node_name="edge-1",
        agent_version="test",
    )


class Hub:
    """Records every link the hub's handler gets; accepts (or refuses) each."""

    def __init__(
        self,
        refuse: CloseCode | None = None,
        *,
        retry_after: float | None = None,
        refuse_first: int | None = None,
    ) -> None:
        self.links: list[Link] = []
        self.arrivals: list[float] = []
        """Loop time of each session's arrival."""
        self.refuse = refuse
        self.retry_after = retry_after
        self.refuse_first = refuse_first
        """Refuse only the first N sessions (all, when ``None``)."""
        self.arrived = asyncio.Condition()

    async def wait_links(self, n: int, timeout: float) -> None:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.links) >= n), timeout)

    async def handler(self, link: Link) -> None:
        async with self.arrived:
            self.links.append(link)
            self.arrivals.append(asyncio.get_running_loop().time())
            self.arrived.notify_all()
        refusing = self.refuse_first is None or len(self.links) <= self.refuse_first
        if self.refuse is not None and refusing:
            link.reject(self.refuse, "refused by the test", retry_after=self.retry_after)
            await link.wait_closed()
            return
        link.accept(
            Welcome(
                version=link.version,
                hub_time=time.time(),
                session_id=f"s{len(self.links)}",
                received_up_to=0,
                heartbeat_interval=20.0,
            )
        )
        async for _ in link:
            pass


def make_uplink(pki_ca: TestPKI, quic_port: int, ws_port: int, host="127.0.0.1", **kw):
    fields = {
        "host": host,
        "quic_port": quic_port,
        "websocket_port": ws_port,
        "server_name": "localhost",
        "quic_handshake_timeout": QUIC_TIMEOUT,
        "websocket_timeout": 5.0,
        "quic_retry_interval": RETRY,
        "backoff_base": 0.05,
        "backoff_cap": 0.2,
    }
    settings = UplinkSettings(**{**fields, **kw})
    links: list[Link] = []

    async def on_link(link: Link) -> None:
        links.append(link)
        await asyncio.Event().wait()  # an application that never returns by itself

    uplink = Uplink(
        settings,
        credentials=lambda: pki_ca.client,
        make_hello=hello,
        pending=list,
        next_seq=lambda: 1,
        on_link=on_link,
    )
    return uplink, links


@contextlib.asynccontextmanager
async def running(uplink: Uplink):
    task = asyncio.get_running_loop().create_task(uplink.run())
    try:
        yield task
    finally:
        started = time.monotonic()
        await uplink.close()
        took = time.monotonic() - started
        link_bound = uplink.settings.session.close_timeout + 1.5
        assert took <= link_bound + 1.0, f"close() took {took:.2f} s"
        await asyncio.wait_for(task, 1.0)


def silent_udp() -> socket.socket:
    """A UDP socket that receives and never answers: a QUIC server behind a UDP black hole."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


async def test_falls_back_to_websocket_then_returns_to_quic(pki_ca) -> None:
    hub = Hub()
    black_hole = silent_udp()
    quic_port = black_hole.getsockname()[1]
    ws = await serve_websocket(hub.handler, "127.0.0.1", 0, credentials=pki_ca.server)
    quic = None
    uplink, links = make_uplink(pki_ca, quic_port, ws.port)
    try:
        async with running(uplink):
            started = time.monotonic()
            await uplink.wait_for_transport(WEBSOCKET, QUIC_TIMEOUT + 5)
            assert time.monotonic() - started <= QUIC_TIMEOUT + 1.0
            assert uplink.preferred == WEBSOCKET
            # UDP works again: a real QUIC server on the same port.
            black_hole.close()
            quic = await serve_quic(hub.handler, "127.0.0.1", quic_port, credentials=pki_ca.server)
            healed = time.monotonic()
            await uplink.wait_for_transport(QUIC, RETRY + QUIC_TIMEOUT + 5)
            assert time.monotonic() - healed <= RETRY + QUIC_TIMEOUT + 1.0
            assert uplink.preferred == QUIC
            assert [link.transport for link in hub.links] == [WEBSOCKET, QUIC]
            # The WebSocket session was closed, not left dangling, before QUIC was dialled.
            ws_link = hub.links[0]
            assert ws_link.closed and ws_link.close_event.code == CloseCode.GOING_AWAY
            assert ws_link.close_event.reason == "moving to QUIC"
            assert not hub.links[1].closed
        await asyncio.wait_for(hub.links[1].wait_closed(), 5)
        assert links and all(link.closed for link in links)
    finally:
        black_hole.close()
        await ws.aclose()
        if quic is not None:
            await quic.aclose()


async def test_goes_straight_to_websocket_until_the_retry_is_due(pki_ca) -> None:
    # After a fallback, a reconnect does not pay the QUIC timeout again.
    hub = Hub()
    black_hole = silent_udp()
    ws = await serve_websocket(hub.handler, "127.0.0.1", 0, credentials=pki_ca.server)
    uplink, _ = make_uplink(pki_ca, black_hole.getsockname()[1], ws.port, quic_retry_interval=600)
    try:
        async with running(uplink):
            await uplink.wait_for_transport(WEBSOCKET, QUIC_TIMEOUT + 5)
            first = hub.links[0]
            await first.close(CloseCode.GOING_AWAY, "hub restarting")
            dropped = time.monotonic()
            await uplink.wait_for_transport(None, 5)
            await uplink.wait_for_transport(WEBSOCKET, 5)
            # backoff (< 0.2 s) + WebSocket connect, no QUIC timeout in between
            assert time.monotonic() - dropped < QUIC_TIMEOUT
            assert len(hub.links) == 2
    finally:
        black_hole.close()
        await ws.aclose()


async def test_refusal_is_not_a_reason_to_fall_back(pki_ca) -> None:
    quic_hub, ws_hub = Hub(refuse=CloseCode.OVERLOADED), Hub()
    quic = await serve_quic(quic_hub.handler, "127.0.0.1", 0, credentials=pki_ca.server)
    ws = await serve_websocket(ws_hub.handler, "127.0.0.1", 0, credentials=pki_ca.server)
    uplink, links = make_uplink(pki_ca, quic.port, ws.port)
    try:
        async with running(uplink):
            await quic_hub.wait_links(3, 10)  # retried, with backoff
            assert ws_hub.links == [] and links == []
    finally:
        await quic.aclose()
        await ws.aclose()


@pytest.mark.parametrize("code", [CloseCode.OVERLOADED, CloseCode.GOING_AWAY], ids=str)
async def test_the_hubs_retry_after_is_the_delay_itself(pki_ca, code: CloseCode) -> None:
    # The agent's own back-off would draw up to 30 s per attempt; the hub's (already
    # jittered) retry_after of 0.3 s is used instead, and does not grow with the refusals.
    hub = Hub(refuse=code, retry_after=0.3, refuse_first=3)
    ws = await serve_websocket(hub.handler, "127.0.0.1", 0, credentials=pki_ca.server)
    uplink, _ = make_uplink(
        pki_ca, 0, ws.port, transports=(WEBSOCKET,), backoff_base=30.0, backoff_cap=30.0
    )
    try:
        async with running(uplink):
            await uplink.wait_for_transport(WEBSOCKET, 10.0)
            assert len(hub.links) == 4  # three refused, the fourth served
            gaps = [b - a for a, b in zip(hub.arrivals, hub.arrivals[1:], strict=False)]
            assert all(0.3 <= gap < 3.0 for gap in gaps), gaps
    finally:
        await ws.aclose()


async def test_a_retry_after_beyond_the_cap_waits_only_the_cap(pki_ca) -> None:
    hub = Hub(refuse=CloseCode.OVERLOADED, retry_after=3600.0, refuse_first=1)
    ws = await serve_websocket(hub.handler, "127.0.0.1", 0, credentials=pki_ca.server)
    uplink, _ = make_uplink(
        pki_ca, 0, ws.port, transports=(WEBSOCKET,), backoff_base=0.2, backoff_cap=0.5
    )
    try:
        async with running(uplink):
            await uplink.wait_for_transport(WEBSOCKET, 10.0)
            assert len(hub.links) == 2 and hub.arrivals[1] - hub.arrivals[0] >= 0.5
    finally:
        await ws.aclose()


async def test_close_is_bounded_while_dialing(pki_ca) -> None:
    # QUIC into a black hole, and a TCP port that accepts but never speaks TLS.
    black_hole = silent_udp()
    tcp = socket.create_server(("127.0.0.1", 0))
    uplink, _ = make_uplink(
        pki_ca, black_hole.getsockname()[1], tcp.getsockname()[1], quic_retry_interval=600
    )
    tcp.setblocking(False)
    accepted: list[socket.socket] = []
    try:
        loop = asyncio.get_running_loop()
        task = loop.create_task(uplink.run())
        # QUIC timed out, the WebSocket dial connected: now stuck in its TLS handshake
        conn, _ = await asyncio.wait_for(loop.sock_accept(tcp), QUIC_TIMEOUT + 10)
        accepted.append(conn)
        started = time.monotonic()
        await uplink.close()
        assert time.monotonic() - started < 1.5
        await asyncio.wait_for(task, 1.0)
        assert uplink.link is None
    finally:
        for conn in accepted:
            conn.close()
        black_hole.close()
        tcp.close()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="quic_handshake_timeout must be > 0"):
        UplinkSettings(host="hub", quic_handshake_timeout=0)
    with pytest.raises(ValueError, match="backoff_cap must be > 0"):
        UplinkSettings(host="hub", backoff_cap=-1)
    with pytest.raises(ValueError, match="quic_max_datagram_size must be >= 1200"):
        UplinkSettings(host="hub", quic_max_datagram_size=576)
    defaults = UplinkSettings(host="hub")
    assert defaults.quic_max_datagram_size == 1200
    assert (defaults.quic_handshake_timeout, defaults.quic_retry_interval) == (3.0, 600.0)
    assert (defaults.backoff_base, defaults.backoff_cap) == (1.0, 60.0)


# -- with a real firewall ---------------------------------------------------------------------

_reason = netns.available()


@pytest.mark.netns
@pytest.mark.skipif(_reason is not None, reason=f"network namespaces: {_reason}")
async def test_udp_dropped_by_firewall(pki_ca, tmp_path) -> None:
    (tmp_path / "ca.pem").write_bytes(pki.dump_certificate_pem(pki_ca.ca.certificate))
    (tmp_path / "server.pem").write_bytes(pki.dump_certificate_pem(pki_ca.server.chain))
    (tmp_path / "server.key").write_bytes(pki.dump_private_key_pem(pki_ca.server.private_key))
    with netns.veth_namespace() as topo:
        topo.ns.iptables("INPUT", "-p", "udp", "-j", "DROP")
        proc = await asyncio.create_subprocess_exec(
            *topo.ns.exec_argv(
                [
                    sys.executable,
                    "-m",
                    "tests.protocol.transport.peer",
                    str(tmp_path),
                    topo.ns_addr,
                    "5",
                    "20",
                ]
            ),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert proc.stdout is not None
            ports = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            uplink, links = make_uplink(
                pki_ca, ports["quic"], ports["websocket"], host=topo.ns_addr
            )
            async with running(uplink):
                started = time.monotonic()
                await uplink.wait_for_transport(WEBSOCKET, QUIC_TIMEOUT + 5)
                assert time.monotonic() - started <= QUIC_TIMEOUT + 1.0
                topo.ns.flush_rules()
                healed = time.monotonic()
                await uplink.wait_for_transport(QUIC, RETRY + QUIC_TIMEOUT + 5)
                assert time.monotonic() - healed <= RETRY + QUIC_TIMEOUT + 1.0
                assert links[0].transport == WEBSOCKET
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
