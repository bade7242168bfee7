"""Packet pacing for aioquic connections with bursts long enough for an asyncio loop.

aioquic paces 1-RTT packets with a token bucket (``aioquic.quic.recovery.QuicPacketPacer``)
that holds at most 16 packets' worth of time (or a quarter of the congestion window) at
the pacing rate. When the bucket is empty the connection asks to be woken when the next
packet is due, tens of microseconds later, but an asyncio timer fires no earlier than the
next loop turn — ~1 ms on a quiet machine, several on a loaded one — and the bucket refills
only to its 16 packets meanwhile: the sender is then capped at 16 packets per wake-up
(measured: ~17 MiB/s with 1,200-byte datagrams on a quiet machine, 2-3 MiB/s under a load
of 10, whatever the congestion window).

:class:`BurstPacer` keeps aioquic's rate (the congestion window over the smoothed RTT) and
its rules, and lets the bucket hold at least :data:`MIN_BURST_SECONDS` of sending time (or
one smoothed RTT if that is shorter: an RTT at the pacing rate is already the whole
congestion window), so one wake-up sends what the rate allows since the last one. A burst
stays bounded by the congestion window (aioquic checks it per packet), so what it can put
on a link at once grows only with what the congestion controller already allows.

:func:`install` swaps the pacer into a connection; the connection keeps it as
``quic._loss._pacer`` (no public setting: this module is the one place that reaches it,
and a test fails if aioquic moves it).
"""

from __future__ import annotations

from aioquic.quic.connection import QuicConnection
from aioquic.quic.recovery import K_MICRO_SECOND, K_SECOND, QuicPacketPacer

__all__ = ["MIN_BURST_SECONDS", "BurstPacer", "install"]

MIN_BURST_SECONDS = 0.004
"""Seconds of sending at the pacing rate one wake-up may catch up on (a few loop turns)."""


class BurstPacer(QuicPacketPacer):
    """aioquic's pacer with a bucket of at least ``min_burst`` seconds.

    Args:
        max_datagram_size: bytes per packet (the connection's).
        min_burst: seconds of sending time the bucket holds at least.
    """

    def __init__(self, *, max_datagram_size: int, min_burst: float = MIN_BURST_SECONDS) -> None:
        super().__init__(max_datagram_size=max_datagram_size)
        self.min_burst = min_burst

    def update_rate(self, congestion_window: int, smoothed_rtt: float) -> None:
        """New rate from the congestion controller (called by aioquic on each RTT sample).

        Args:
            congestion_window: bytes.
            smoothed_rtt: seconds.
        """
        pacing_rate = congestion_window / max(smoothed_rtt, K_MICRO_SECOND)  # bytes/s
        size = self._max_datagram_size
        self.packet_time = max(K_MICRO_SECOND, min(size / pacing_rate, K_SECOND))
        burst_bytes = max(2 * size, min(congestion_window // 4, 16 * size))  # aioquic's
        self.bucket_max = max(burst_bytes / pacing_rate, min(self.min_burst, smoothed_rtt))
        if self.bucket_time > self.bucket_max:
            self.bucket_time = self.bucket_max


def install(quic: QuicConnection, *, min_burst: float = MIN_BURST_SECONDS) -> BurstPacer:
    """Give ``quic`` a :class:`BurstPacer` (before it sends, or at any time after).

    Returns:
        The pacer now in use.
    """
    loss = quic._loss  # no public accessor: see the module docstring
    pacer = BurstPacer(max_datagram_size=quic._max_datagram_size, min_burst=min_burst)
    old = loss._pacer
    pacer.packet_time, pacer.bucket_max = old.packet_time, old.bucket_max
    pacer.bucket_time, pacer.evaluation_time = old.bucket_time, old.evaluation_time
    loss._pacer = pacer
    return pacer
