"""Bigger UDP receive buffers for QUIC (issue 18 item 4): the hub asks for
``listen.quic_receive_buffer`` on its QUIC socket and the kernel grants up to
``net.core.rmem_max``; and what that buys, measured on real loopback sockets: a burst of
handshake-sized datagrams arriving while the receiver does not read (its loop busy) is kept
whole by the bigger buffer and cut short by the default one."""

from __future__ import annotations

import pathlib
import socket
import sys

from tests.cloudhub.hub.conftest import Hubs
from tests.environment import not_applicable

DATAGRAM = b"\xc0" + bytes(1199)  # the size of a QUIC Initial (1,200 bytes)
BURST = 2000
BIG = 4 * 1024 * 1024


def _rmem_max() -> int:
    path = pathlib.Path("/proc/sys/net/core/rmem_max")
    if sys.platform != "linux" or not path.exists():
        not_applicable("SO_RCVBUF accounting is Linux's (doubled, capped at rmem_max)")
    return int(path.read_text())


async def test_the_hub_asks_for_a_bigger_quic_receive_buffer(hubs: Hubs) -> None:
    granted = min(BIG, _rmem_max())
    hub = await hubs.start({"listen.quic_receive_buffer": BIG})
    assert hub.quic_receive_buffer == 2 * granted  # Linux reports twice what it holds


def _kept(receive_buffer: int) -> int:
    """Datagrams of a burst still readable once the burst is over (none read meanwhile)."""
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
    ):
        if receive_buffer:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        rx.bind(("127.0.0.1", 0))
        for _ in range(BURST):
            tx.sendto(DATAGRAM, rx.getsockname())
        rx.setblocking(False)
        kept = 0
        while True:
            try:
                rx.recv(2048)
            except BlockingIOError:
                return kept
            kept += 1


def test_a_bigger_receive_buffer_keeps_a_burst_the_default_drops() -> None:
    if _rmem_max() < BIG:
        not_applicable(f"net.core.rmem_max is {_rmem_max()} here: the kernel caps the buffer")
    default, bigger = _kept(0), _kept(BIG)
    print(f"burst of {BURST} x 1200 B: default buffer kept {default}, 4 MiB kept {bigger}")
    assert bigger == BURST
    assert default < BURST // 2
