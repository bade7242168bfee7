"""A userspace UDP and TCP relay between one edge agent and the hub, that the demo can cut.

``Relay(target_port)`` listens on one loopback port for both UDP (QUIC) and TCP (WebSocket)
and forwards to the hub's session port. :meth:`Relay.cut` makes it a dead link, the way a
dropped cellular link or a NAT that forgot the flow looks to both ends:

- UDP datagrams in either direction are dropped (counted in ``dropped_datagrams``);
- TCP connections stay open but nothing moves: the relay stops reading both sockets, so
  bytes wait in the kernel's buffers and the peers see a silent link (no FIN, no RST),
  exactly what TCP shows while its packets are dropped and retransmitted; a connection
  made during the cut is accepted and held without reaching the hub (a handshake that
  never completes).

:meth:`Relay.restore` lets everything flow again (held connections then reach the hub).
Endpoints notice a cut only through their own liveness timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["Relay"]

_CHUNK = 64 * 1024


class _Pipe:
    """One TCP connection through the relay: the agent's side and the hub's side."""

    def __init__(self, relay: Relay, reader: asyncio.StreamReader, writer: Any) -> None:
        self.relay = relay
        self.front = (reader, writer)
        self.flowing = asyncio.Event()
        if not relay.is_cut:
            self.flowing.set()

    async def run(self) -> None:
        reader, writer = self.front
        try:
            await self.flowing.wait()  # held while cut: the handshake waits
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.relay.target)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(
                self._copy(reader, up_writer, "up"), self._copy(up_reader, writer, "down")
            )
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _copy(self, reader: asyncio.StreamReader, writer: Any, direction: str) -> None:
        try:
            while True:
                await self.flowing.wait()  # not reading while cut: nothing moves
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await self.flowing.wait()  # read just before a cut: held, not dropped
                writer.write(data)
                await writer.drain()
                self.relay.count(direction, len(data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                if writer.can_write_eof():
                    writer.write_eof()


class Relay:
    """Forwards UDP and TCP from ``port`` (loopback) to ``target`` (the hub's session port).

    Args:
        target: the hub's session port (QUIC on UDP, WebSocket on TCP).
        port: the port to listen on for both; it must be free for TCP and UDP.

    Attributes:
        up_bytes / down_bytes: payload bytes forwarded agent → hub / hub → agent.
        dropped_datagrams: UDP datagrams dropped while cut.
    """

    def __init__(self, target: int, port: int) -> None:
        self.target = target
        self.port = port
        self.up_bytes = 0
        self.down_bytes = 0
        self.dropped_datagrams = 0
        self._cut = False
        self._pipes: set[_Pipe] = set()
        self._tasks: set[asyncio.Task] = set()
        self._transports: list[asyncio.BaseTransport] = []
        self._server: asyncio.base_events.Server | None = None

    @property
    def is_cut(self) -> bool:
        """Whether the link is cut now."""
        return self._cut

    def count(self, direction: str, n: int) -> None:
        if direction == "up":
            self.up_bytes += n
        else:
            self.down_bytes += n

    def cut(self) -> None:
        """Drop every packet from now on, closing nothing."""
        self._cut = True
        for pipe in self._pipes:
            pipe.flowing.clear()

    def restore(self) -> None:
        """Let packets flow again."""
        self._cut = False
        for pipe in self._pipes:
            pipe.flowing.set()

    async def start(self) -> None:
        """Bind the UDP and TCP listeners.

        Raises:
            OSError: the port is taken.
        """
        loop = asyncio.get_running_loop()
        relay = self

        class Upstream(asyncio.DatagramProtocol):
            def __init__(self, front: Any, addr: Any) -> None:
                self.front, self.addr = front, addr

            def datagram_received(self, data: bytes, _addr: Any) -> None:
                if relay.is_cut:
                    relay.dropped_datagrams += 1
                    return
                relay.count("down", len(data))
                self.front.sendto(data, self.addr)

        class Front(asyncio.DatagramProtocol):
            def __init__(self) -> None:
                self.transport: Any = None
                self.upstreams: dict[Any, Any] = {}

            def connection_made(self, transport: Any) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: Any) -> None:
                if relay.is_cut:
                    relay.dropped_datagrams += 1
                    return
                relay.count("up", len(data))
                upstream = self.upstreams.get(addr)
                if upstream is None:
                    self.upstreams[addr] = [data]
                    relay._spawn(self._open(addr))
                elif isinstance(upstream, list):
                    upstream.append(data)
                else:
                    upstream.sendto(data)

            async def _open(self, addr: Any) -> None:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: Upstream(self.transport, addr),
                    remote_addr=("127.0.0.1", relay.target),
                )
                relay._transports.append(transport)
                queued, self.upstreams[addr] = self.upstreams[addr], transport
                for data in queued:
                    transport.sendto(data)

        front, _ = await loop.create_datagram_endpoint(Front, local_addr=("127.0.0.1", self.port))
        self._transports.append(front)

        async def accept(reader: asyncio.StreamReader, writer: Any) -> None:
            pipe = _Pipe(self, reader, writer)
            self._pipes.add(pipe)
            try:
                await pipe.run()
            finally:
                self._pipes.discard(pipe)

        self._server = await asyncio.start_server(
            lambda r, w: self._spawn(accept(r, w)), "127.0.0.1", self.port
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Close the listeners and every connection."""
        if self._server is not None:
            self._server.close()
        for transport in self._transports:
            transport.close()
        for pipe in list(self._pipes):
            pipe.front[1].close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
