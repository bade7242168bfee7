"""What the QUIC adapter relies on in aioquic beyond its public API.

The client-certificate switches are covered by the rejection tests in test_loopback.py
(they fail if aioquic renames them). The acknowledgement delay is a performance setting:
a renamed attribute would silently stop working, so this canary checks it still exists
with the meaning we rely on.
"""

from __future__ import annotations

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

from protocol.transport.quic import ACK_DELAY


def test_aioquic_still_has_the_ack_delay_the_adapter_sets() -> None:
    quic = QuicConnection(configuration=QuicConfiguration(is_client=True))
    default = quic._ack_delay  # seconds before a received packet is acknowledged
    assert isinstance(default, float) and 0 < default < ACK_DELAY
