"""What the QUIC adapter relies on in aioquic beyond its public API.

The client-certificate switches are covered by the rejection tests in test_loopback.py
(they fail if aioquic renames them). The acknowledgement delay is a performance setting:
a renamed attribute would silently stop working, so this canary checks it still exists
with the meaning we rely on; so is the pacer (protocol/transport/pacing.py).
"""

from __future__ import annotations

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.recovery import QuicPacketPacer

from protocol.transport import pacing
from protocol.transport.pacing import MIN_BURST_SECONDS, BurstPacer
from protocol.transport.quic import ACK_DELAY


def test_aioquic_still_has_the_ack_delay_the_adapter_sets() -> None:
    quic = QuicConnection(configuration=QuicConfiguration(is_client=True))
    default = quic._ack_delay  # seconds before a received packet is acknowledged
    assert isinstance(default, float) and 0 < default < ACK_DELAY


def _packets_in_one_wakeup(pacer: QuicPacketPacer, wakeup: float) -> int:
    """Packets the pacer lets out when the loop wakes ``wakeup`` s after it was drained."""
    now = 10.0
    while pacer.next_send_time(now) is None:  # drain the bucket
        pacer.update_after_send(now)
    now += wakeup
    sent = 0
    while pacer.next_send_time(now) is None:
        pacer.update_after_send(now)
        sent += 1
    return sent


def test_a_burst_covers_the_time_between_loop_wakeups() -> None:
    # 1 MiB window, 20 ms RTT: 50 MiB/s, one 1,200-byte packet every 23 us
    ours, theirs = BurstPacer(max_datagram_size=1200), QuicPacketPacer(max_datagram_size=1200)
    for pacer in (ours, theirs):
        pacer.update_rate(congestion_window=1 << 20, smoothed_rtt=0.020)
    rate_per_ms = (1 << 20) / 0.020 / 1200 / 1000  # ~44 packets a millisecond
    # a 3 ms wake-up on a loaded machine: aioquic lets out 16 packets (its bucket), ours
    # what the rate allowed over the 3 ms
    assert _packets_in_one_wakeup(theirs, 0.003) <= 17
    assert _packets_in_one_wakeup(ours, 0.003) >= 0.9 * 3 * rate_per_ms
    # and never more than MIN_BURST_SECONDS' worth, however long the loop slept
    assert _packets_in_one_wakeup(ours, 1.0) <= 1.1 * MIN_BURST_SECONDS * 1000 * rate_per_ms


def test_a_burst_never_outgrows_the_congestion_window() -> None:
    pacer = BurstPacer(max_datagram_size=1200)
    pacer.update_rate(congestion_window=24_000, smoothed_rtt=0.001)  # 20 packets per RTT
    assert _packets_in_one_wakeup(pacer, 1.0) <= 21


def test_aioquic_still_keeps_the_pacer_where_install_puts_ours() -> None:
    quic = QuicConnection(configuration=QuicConfiguration(is_client=True))
    assert isinstance(quic._loss._pacer, QuicPacketPacer)  # where aioquic reads it
    assert isinstance(quic._max_datagram_size, int)
    pacer = pacing.install(quic)
    assert quic._loss._pacer is pacer and isinstance(pacer, BurstPacer)
    # aioquic's loss recovery feeds it its rate
    quic._loss._pacer.update_rate(congestion_window=120_000, smoothed_rtt=0.01)
    assert pacer.packet_time is not None and pacer.bucket_max >= MIN_BURST_SECONDS
