"""A slow, lossy link for tests: a userspace TCP and UDP relay with a rate limit and loss.

``tc netem`` is not available on our machines (docs/DESIGN.md, "Test infrastructure"), so
this relay plays the narrow link between an agent and the hub on loopback:

- one port for both TCP (WebSocket) and UDP (QUIC), forwarding to ``target``;
- each direction is a link of ``rate`` bytes/s, shared by every flow in that direction:
  bytes are delivered when their serialisation time has passed, as a router would;
- TCP: the relay reads the next piece only once the last one is through, with its receive
  buffers fixed at ``buffer_bytes`` (no autotuning: on loopback Linux grows them to
  megabytes, a router queue no real link has), so back-pressure reaches the sender's
  socket as through a ``tc tbf`` queue of that size;
- UDP: a queue of at most ``queue_bytes`` per direction (tail drop when full) and a
  random ``loss`` fraction dropped, from a seeded ``random.Random`` (reproducible).

The pacing sleeps are the link's model of time, not a synchronisation: tests wait on
their own conditions (messages arrived, events seen).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections import deque
from typing import Any

__all__ = ["SlowLink"]

_PIECE = 2048  # bytes per TCP read: the link's delivery granularity


class _Direction:
    """One direction of the link: a serialiser at ``rate`` bytes/s."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.free_at = 0.0  # when the link has sent what it was given
        self.bytes = 0

    def slot(self, n: int, now: float) -> float:
        """When ``n`` bytes given now are through (seconds on the loop's clock)."""
        start = max(now, self.free_at)
        self.free_at = start + n / self.rate
        self.bytes += n
        return self.free_at


class SlowLink:
    """A rate-limited, lossy relay to ``127.0.0.1:target`` (use ``async with``).

    Args:
        target: the port to forward to (TCP and UDP).
        rate: bytes per second, each direction (64 kbit/s is 8,000).
        loss: the fraction of UDP datagrams dropped at random (0..1).
        queue_bytes: the UDP queue per direction (tail drop beyond it).
        buffer_bytes: the TCP receive buffer of the relay's sockets, each way.
        seed: for the loss draws.

    Attributes:
        port: where to connect (TCP and UDP).
        dropped: UDP datagrams dropped (loss and full queue).
        tcp_connections: TCP connections accepted.
    """

    def __init__(
        self,
        target: int,
        *,
        rate: float,
        loss: float = 0.0,
        queue_bytes: int = 64 * 1024,
        buffer_bytes: int = 16 * 1024,
        seed: int = 15,
    ) -> None:
        self.buffer_bytes = buffer_bytes
        self.target = target
        self.port = 0
        self.loss = loss
        self.queue_bytes = queue_bytes
        self.dropped = 0
        self.tcp_connections = 0
        self._random = random.Random(seed)
        self._dirs = {"up": _Direction(rate), "down": _Direction(rate)}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closers: list[Any] = []
        self._writers: list[Any] = []

    def sent(self, direction: str) -> int:
        """Bytes the link carried in ``"up"`` (to the target) or ``"down"``."""
        return self._dirs[direction].bytes

    async def __aenter__(self) -> SlowLink:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        server = await asyncio.start_server(self._accept, sock=sock, limit=_PIECE)
        self._closers.append(server)
        udp, _ = await loop.create_datagram_endpoint(
            lambda: _Front(self), local_addr=("127.0.0.1", self.port)
        )
        self._closers.append(udp)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for closer in self._closers:
            closer.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- TCP ------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tcp_connections += 1
        self._writers.append(writer)
        writer.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVBUF, self.buffer_bytes
        )
        loop = asyncio.get_running_loop()
        up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        up.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.buffer_bytes)
        up.setblocking(False)
        try:
            await loop.sock_connect(up, ("127.0.0.1", self.target))
            up_reader, up_writer = await asyncio.open_connection(sock=up, limit=_PIECE)
        except OSError:
            up.close()
            writer.close()
            return
        self._writers.append(up_writer)
        pipes = [
            asyncio.ensure_future(self._copy(reader, up_writer, "up")),
            asyncio.ensure_future(self._copy(up_reader, writer, "down")),
        ]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            writer.close()
            up_writer.close()

    async def _copy(self, reader: asyncio.StreamReader, writer: Any, direction: str) -> None:
        link = self._dirs[direction]
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(_PIECE):
                done = link.slot(len(data), loop.time())
                await asyncio.sleep(max(0.0, done - loop.time()))  # the link's serialisation
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

    # -- UDP ------------------------------------------------------------------------------

    def datagram(self, data: bytes, direction: str, send: Any) -> None:
        """Queue one datagram on a direction of the link (or drop it)."""
        if self.loss and self._random.random() < self.loss:
            self.dropped += 1
            return
        link = self._dirs[direction]
        loop = asyncio.get_running_loop()
        backlog = max(0.0, link.free_at - loop.time()) * link.rate
        if backlog + len(data) > self.queue_bytes:
            self.dropped += 1
            return
        done = link.slot(len(data), loop.time())
        loop.call_at(done, send, data)


class _Upstream(asyncio.DatagramProtocol):
    """The relay's socket toward the target, for one client address."""

    def __init__(self, link: SlowLink, front: Any, addr: Any) -> None:
        self.link, self.front, self.addr = link, front, addr
        self.transport: Any = None
        self.queued: deque[bytes] = deque()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        while self.queued:
            self.send(self.queued.popleft())

    def send(self, data: bytes) -> None:
        if self.transport is None:
            self.queued.append(data)
        elif not self.transport.is_closing():
            self.transport.sendto(data)

    def datagram_received(self, data: bytes, _addr: Any) -> None:
        front = self.front.transport
        self.link.datagram(
            data,
            "down",
            lambda d: None if front.is_closing() else front.sendto(d, self.addr),
        )


class _Front(asyncio.DatagramProtocol):
    """The relay's public UDP socket: one upstream socket per client address."""

    def __init__(self, link: SlowLink) -> None:
        self.link = link
        self.transport: Any = None
        self.upstreams: dict[Any, _Upstream] = {}

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        upstream = self.upstreams.get(addr)
        if upstream is None:
            upstream = self.upstreams[addr] = _Upstream(self.link, self, addr)
            self.link.spawn(self._open(upstream))
        self.link.datagram(data, "up", upstream.send)

    async def _open(self, upstream: _Upstream) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: upstream, remote_addr=("127.0.0.1", self.link.target)
        )
        self.link._closers.append(transport)
