"""How large QUIC's UDP datagrams are on a path.

Per packet, aioquic costs ~100 us of Python on each side whatever the packet's size
(building, protecting, acknowledging, loss bookkeeping), so the datagram size decides how
many MiB a CPU second moves (measured in one process, both ends, load ~12: 174 ms of CPU per
MiB at 1,200 bytes, 50 at 8,000).
"""

from __future__ import annotations

import ipaddress

from protocol.errors import UsageError

__all__ = ["LOOPBACK_DATAGRAM_SIZE", "MAX_DATAGRAM_SIZE", "datagram_size"]

MAX_DATAGRAM_SIZE = 1200
"""Default bytes per UDP datagram on a path off this host: QUIC's minimum (RFC 9000
section 14), which every path that carries QUIC carries. aioquic 1.7 has no path MTU
discovery, so a larger value is a promise the operator makes for every path the
connection may take (``quic_max_datagram_size`` in both programs' settings; a path that
drops larger datagrams silently would black-hole the connection)."""

LOOPBACK_DATAGRAM_SIZE = 8192
"""Bytes per datagram when the peer is a loopback address: then the path is normally this
host's loopback interface (64 KiB MTU) and nothing else, so no discovery is needed (a hub
and an agent on one machine: the demo, the tests, the benchmarks). Below aioquic's
16,383-byte long-header length limit, and small enough that a default 208 KiB socket
receive buffer still holds two dozen. A loopback peer that is really a local relay onto a
real path (a UDP proxy or tunnel endpoint, the slow-link tests' relay) needs the path's
size instead: ``quic_loopback_datagram_size`` 0 in the settings."""


def datagram_size(
    peer_host: str, configured: int = MAX_DATAGRAM_SIZE, loopback: int = LOOPBACK_DATAGRAM_SIZE
) -> int:
    """The datagram size for a connection with ``peer_host`` (bytes): ``configured``, or
    ``loopback`` if larger and the peer is a loopback address (``127.0.0.0/8``, ``::1``,
    or IPv4 loopback mapped into IPv6); ``loopback`` 0 treats loopback like any path.

    Raises:
        UsageError: ``configured`` is below QUIC's minimum of 1,200 bytes, or either is
            above aioquic's 16,000.
    """
    if not MAX_DATAGRAM_SIZE <= configured <= 16000:
        raise UsageError(f"a QUIC datagram size of {configured} bytes (1200..16000)")
    if loopback > 16000:
        raise UsageError(f"a loopback QUIC datagram size of {loopback} bytes (at most 16000)")
    try:
        address = ipaddress.ip_address(peer_host.split("%", 1)[0])
    except ValueError:
        return configured
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    is_loopback = address.is_loopback or (mapped is not None and mapped.is_loopback)
    return max(configured, loopback) if is_loopback else configured
