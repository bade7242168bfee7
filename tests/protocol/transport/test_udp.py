"""The batched UDP socket (protocol/transport/udp.py) on real loopback sockets."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
from typing import Any

import pytest

from protocol.transport import udp
from protocol.transport.udp import UDPSocket, open_udp
from tests.waiting import eventually


class Recorder:
    def __init__(self) -> None:
        self.datagrams: list[bytes] = []
        self.batches: list[int] = []
        self._count = 0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.datagrams.append(data)
        self._count += 1

    def batch_done(self) -> None:
        self.batches.append(self._count)
        self._count = 0


async def _pair(*, gso: bool = True) -> tuple[UDPSocket, Recorder, UDPSocket, Recorder]:
    server_rx, client_rx = Recorder(), Recorder()
    server = await open_udp(server_rx, local=("127.0.0.1", 0), gso=gso)
    client = await open_udp(client_rx, remote=("127.0.0.1", server.sockname[1]), gso=gso)
    return server, server_rx, client, client_rx


async def test_datagrams_ready_together_are_one_batch() -> None:
    server, server_rx, client, _ = await _pair()
    try:
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(50):  # all sent before the loop turns: all ready at once
            sender.sendto(b"%03d" % i + bytes(1000), server.sockname)
        sender.close()
        await eventually(lambda: len(server_rx.datagrams) == 50, what="50 datagrams received")
        assert [d[:3] for d in server_rx.datagrams] == [b"%03d" % i for i in range(50)]
        assert len(server_rx.batches) < 10, server_rx.batches  # not one loop turn each
        assert sum(server_rx.batches) == 50
    finally:
        server.close()
        client.close()


@pytest.mark.parametrize("gso", [True, False])
async def test_a_round_of_datagrams_arrives_whole_and_in_order(gso: bool) -> None:
    server, server_rx, client, _ = await _pair(gso=gso)
    try:
        sizes = [1200] * 40 + [700] + [1200] * 3 + [1200, 90]
        datagrams = [bytes([i]) * size for i, size in enumerate(sizes)]
        client.send(datagrams)
        await eventually(
            lambda: len(server_rx.datagrams) == len(sizes), what="every datagram received"
        )
        assert server_rx.datagrams == datagrams  # the kernel split GSO runs back apart
        assert client.datagrams_sent == len(sizes)
        if gso and client.gso:  # runs of equal sizes, each ended by a shorter one: 2 writes
            assert client.system_calls == 2
        else:
            assert client.system_calls == len(sizes)
    finally:
        server.close()
        client.close()


async def test_the_server_answers_each_peer_at_its_address() -> None:
    server, server_rx, client, client_rx = await _pair()
    other_rx = Recorder()
    other = await open_udp(other_rx, remote=("127.0.0.1", server.sockname[1]))
    try:
        client.send([b"from client"])
        other.send([b"from other"])
        await eventually(lambda: len(server_rx.datagrams) == 2, what="both datagrams")
        server.send([b"to client"], client.socket.getsockname())
        server.send([b"to other"], other.socket.getsockname())
        await eventually(
            lambda: client_rx.datagrams == [b"to client"] and other_rx.datagrams == [b"to other"],
            what="each answer at its peer",
        )
    finally:
        for one in (server, client, other):
            one.close()


async def test_a_full_send_buffer_queues_a_bounded_backlog_then_drains(monkeypatch) -> None:
    # A Unix datagram pair: unlike loopback UDP (which drops at the receiver), its sender
    # really finds the send buffer full when the reader lags.
    one, two = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx = Recorder()
    sender, receiver = UDPSocket(one, Recorder(), gso=False), UDPSocket(two, rx, gso=False)
    try:
        monkeypatch.setattr(udp, "SEND_BACKLOG_BYTES", 200 * 1024)
        datagrams = [i.to_bytes(4, "big") + bytes(1196) for i in range(400)]  # 480 KB
        sender.send(datagrams)  # all at once, before the reader's turn
        assert 0 < sender.backlog_bytes <= 200 * 1024
        await eventually(lambda: sender.backlog_bytes == 0, what="the backlog written")
        await eventually(lambda: rx.datagrams, what="datagrams arrived")
        numbers = [int.from_bytes(d[:4], "big") for d in rx.datagrams]
        assert numbers == sorted(numbers)  # never reordered, whatever was dropped
        assert len(numbers) < 400  # beyond the backlog's bound: dropped, as a full network
        sender.send([b"after"])  # and the socket goes on
        await eventually(lambda: rx.datagrams[-1] == b"after", what="the next datagram")
    finally:
        sender.close()
        receiver.close()


async def test_an_unreachable_peer_is_a_loss_not_an_error() -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nobody listens there now: the kernel answers ICMP port unreachable
    rx = Recorder()
    client = await open_udp(rx, remote=("127.0.0.1", port))
    try:
        client.send([b"anyone?"])
        await eventually(lambda: client.errors >= 1, what="the ICMP error taken as a loss")
        client.send([b"still there?"])  # the socket goes on
        await eventually(lambda: client.errors >= 2, what="the second ICMP error")
        assert rx.datagrams == []
    finally:
        client.close()
    client.close()  # idempotent


async def test_a_name_that_does_not_resolve_is_an_os_error() -> None:
    with pytest.raises(OSError):
        await open_udp(Recorder(), remote=("no-such-host.invalid", 4433))


async def test_an_address_in_use_is_an_os_error() -> None:
    first = await open_udp(Recorder(), local=("127.0.0.1", 0))
    try:
        with pytest.raises(OSError):
            await open_udp(Recorder(), local=("127.0.0.1", first.sockname[1]))
    finally:
        first.close()


class _CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, counting the jobs given to it (getaddrinfo's)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.jobs = 0

    def submit(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        self.jobs += 1
        return super().submit(*args, **kwargs)


@pytest.mark.parametrize("literal", ["127.0.0.1", "::1"])
async def test_an_address_literal_is_not_resolved_in_a_thread(literal: str) -> None:
    # An agent dialling its hub by address keeps one thread (no resolver thread, with its
    # stack and malloc arena, for the process's lifetime); a name still goes to the loop.
    loop = asyncio.get_running_loop()
    executor = _CountingExecutor()
    loop.set_default_executor(executor)
    try:
        family = socket.AF_INET6 if ":" in literal else socket.AF_INET
        server = await open_udp(Recorder(), local=(literal, 0))
        client = await open_udp(Recorder(), remote=(literal, server.sockname[1]))
        assert (server.socket.family, client.socket.family) == (family, family)
        assert client.socket.getpeername()[:2] == (literal, server.sockname[1])
        assert executor.jobs == 0
        named = await open_udp(Recorder(), remote=("localhost", server.sockname[1]))
        assert executor.jobs == 1
        for sock in (server, client, named):
            sock.close()
    finally:
        executor.shutdown(wait=True)
