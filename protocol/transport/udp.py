"""A UDP socket for the QUIC transport, read and written in batches.

asyncio's datagram transport reads one datagram per event-loop turn and makes one
``sendto`` system call per datagram it is given. For QUIC at tens of MiB/s that is
~20,000 loop turns and as many system calls a second on each side; each received
datagram also made the QUIC adapter drain events and build packets on its own.

:class:`UDPSocket` instead, when the socket is readable, reads every datagram ready (up
to :data:`READ_BATCH`), hands each to the receiver, then tells the receiver the batch is
over (``batch_done``), so the QUIC adapter builds its answers once per batch and per
connection. :meth:`UDPSocket.send` takes all the datagrams of one round and, where the
kernel offers UDP generic segmentation offload (``UDP_SEGMENT``, Linux 4.18), writes runs
of equal-sized datagrams in one ``sendmsg`` (the kernel splits them again, so the peer
sees ordinary datagrams); elsewhere, or when the kernel refuses it once, one ``sendto``
each. A send that would block queues at most :data:`SEND_BACKLOG_BYTES` and is written when
the socket drains; beyond that datagrams are dropped, as a full network would, for QUIC's
loss recovery to resend.

This is the one module that touches UDP sockets; it holds no protocol logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import struct
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["READ_BATCH", "SEND_BACKLOG_BYTES", "DatagramReceiver", "UDPSocket", "open_udp"]

logger = logging.getLogger(__name__)

READ_BATCH = 128
"""Datagrams read in one go before the loop turns (bounds the time one socket holds it)."""

SEND_BACKLOG_BYTES = 1 << 20
"""Bytes queued while the socket's send buffer is full; datagrams beyond are dropped."""

_SOL_UDP = getattr(socket, "SOL_UDP", 17)
_UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)  # linux/udp.h
_GSO_MAX_SEGMENTS = 64  # UDP_MAX_SEGMENTS in the kernel
_GSO_MAX_BYTES = 65000  # below the 64 KiB IP datagram limit, headers included
_MAX_DATAGRAM = 65535


class DatagramReceiver(Protocol):
    """What a :class:`UDPSocket` feeds."""

    def datagram_received(self, data: bytes, addr: Any) -> None:
        """One datagram (its source address: ``(host, port)`` or the IPv6 4-tuple)."""

    def batch_done(self) -> None:
        """Every datagram ready was handed over: answer now."""


class UDPSocket:
    """One non-blocking UDP socket on the running loop (see the module docstring).

    Args:
        sock: a bound (server) or connected (client) datagram socket.
        receiver: gets the datagrams.
        gso: use UDP segmentation offload where the kernel has it.
    """

    def __init__(self, sock: socket.socket, receiver: DatagramReceiver, *, gso: bool = True):
        sock.setblocking(False)
        self.socket = sock
        self.receiver = receiver
        self.gso = gso and hasattr(socket.socket, "sendmsg")
        self.datagrams_sent = 0
        self.system_calls = 0  # sends, for the tests and benchmarks to see the batching
        self.errors = 0  # send and receive errors taken as losses (ICMP unreachable...)
        self._loop = asyncio.get_running_loop()
        self._backlog: deque[tuple[bytes, Any]] = deque()
        self._backlog_bytes = 0
        self._closed = False
        self._loop.add_reader(sock.fileno(), self._read_ready)

    @property
    def backlog_bytes(self) -> int:
        """Bytes waiting for the socket's send buffer to drain."""
        return self._backlog_bytes

    @property
    def sockname(self) -> Any:
        """The bound address."""
        return self.socket.getsockname()

    # -- reading ------------------------------------------------------------------------------

    def _read_ready(self) -> None:
        recvfrom, receiver = self.socket.recvfrom, self.receiver
        got = 0
        try:
            while got < READ_BATCH:
                try:
                    data, addr = recvfrom(_MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # ICMP unreachable and the like: loss, for QUIC
                    logger.debug("UDP receive error: %s", exc)
                    self.errors += 1
                    continue
                got += 1
                receiver.datagram_received(data, addr)
        finally:
            if got:
                receiver.batch_done()

    # -- writing ------------------------------------------------------------------------------

    def send(self, datagrams: Sequence[bytes], addr: Any = None) -> None:
        """Send datagrams to ``addr`` (``None``: the connected peer), in order."""
        if self._closed or not datagrams:
            return
        if self._backlog:  # keep the order: behind what waits already
            for data in datagrams:
                self._queue(data, addr)
            return
        i, count = 0, len(datagrams)
        while i < count:
            j = self._run_end(datagrams, i) if self.gso else i + 1
            try:
                self._write(datagrams, i, j, addr)
            except (BlockingIOError, InterruptedError):
                for data in datagrams[i:]:
                    self._queue(data, addr)
                self._loop.add_writer(self.socket.fileno(), self._write_ready)
                return
            except OSError as exc:
                if j - i > 1 and exc.errno in (errno.EIO, errno.EINVAL, errno.ENOPROTOOPT):
                    logger.info("UDP segmentation offload refused (%s): one datagram a call", exc)
                    self.gso = False
                    continue
                logger.debug("UDP send error: %s", exc)  # unreachable and the like: a loss
                self.errors += 1
            i = j

    @staticmethod
    def _run_end(datagrams: Sequence[bytes], start: int) -> int:
        """End of the run from ``start`` that one GSO write may carry: equal sizes, the
        last one possibly shorter."""
        size = len(datagrams[start])
        end, total = start + 1, size
        limit = min(len(datagrams), start + _GSO_MAX_SEGMENTS)
        while end < limit and total + size <= _GSO_MAX_BYTES:
            n = len(datagrams[end])
            if n > size:
                break
            end += 1
            total += n
            if n < size:
                break
        return end

    def _write(self, datagrams: Sequence[bytes], i: int, j: int, addr: Any) -> None:
        sock = self.socket
        self.system_calls += 1
        if j - i == 1:
            if addr is None:
                sock.send(datagrams[i])
            else:
                sock.sendto(datagrams[i], addr)
        else:
            segment = struct.pack("=H", len(datagrams[i]))
            cmsg = [(_SOL_UDP, _UDP_SEGMENT, segment)]
            if addr is None:
                sock.sendmsg([b"".join(datagrams[i:j])], cmsg)
            else:
                sock.sendmsg([b"".join(datagrams[i:j])], cmsg, 0, addr)
        self.datagrams_sent += j - i

    def _queue(self, data: bytes, addr: Any) -> None:
        if self._backlog_bytes + len(data) > SEND_BACKLOG_BYTES:
            return  # dropped, as a full network would: QUIC's loss recovery resends
        self._backlog.append((data, addr))
        self._backlog_bytes += len(data)

    def _write_ready(self) -> None:
        backlog = self._backlog
        while backlog:
            data, addr = backlog[0]
            try:
                self._write([data], 0, 1, addr)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.debug("UDP send error: %s", exc)
                self.errors += 1
            backlog.popleft()
            self._backlog_bytes -= len(data)
        self._loop.remove_writer(self.socket.fileno())

    def close(self) -> None:
        """Stop reading, drop what waits, close the socket (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self.socket.fileno())
            self._loop.remove_writer(self.socket.fileno())
        self._backlog.clear()
        self.socket.close()


async def open_udp(
    receiver: DatagramReceiver,
    *,
    local: tuple[str, int] | None = None,
    remote: tuple[str, int] | None = None,
    gso: bool = True,
) -> UDPSocket:
    """A :class:`UDPSocket` bound to ``local`` (a server) or connected to ``remote``.

    Args:
        receiver: gets the datagrams.
        local: address and port to bind (port 0 picks one).
        remote: address and port to connect to (names resolved here).
        gso: use UDP segmentation offload where the kernel has it.

    Raises:
        OSError: the name does not resolve, or the address cannot be bound or reached.
    """
    loop = asyncio.get_running_loop()
    host, port = remote if remote is not None else (local or ("::", 0))
    flags = 0 if remote is not None else socket.AI_PASSIVE
    try:
        infos = _numeric_address(host, port, flags)
        if infos is None:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM, flags=flags)
    except socket.gaierror as exc:
        raise OSError(f"{host}: {exc}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        if remote is not None:
            sock.connect(address)
        else:
            sock.bind(address)
    except OSError:
        sock.close()
        raise
    return UDPSocket(sock, receiver, gso=gso)


def _numeric_address(host: str, port: int, flags: int) -> list | None:
    """``getaddrinfo`` for an address literal, answered at once without DNS
    (``AI_NUMERICHOST``), or None for a name. As asyncio's own endpoints do (its
    ``_ipaddr_info``): a literal never goes to the loop's resolver, whose default executor
    would start a thread (a stack and a malloc arena kept for the agent's lifetime) to
    resolve what needs no resolving."""
    try:
        return socket.getaddrinfo(
            host, port, type=socket.SOCK_DGRAM, flags=flags | socket.AI_NUMERICHOST
        )
    except socket.gaierror:
        return None
