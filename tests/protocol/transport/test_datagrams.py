"""QUIC datagram sizes per path (protocol/transport/datagrams.py) and their checks."""

from __future__ import annotations

import pytest

from protocol.errors import UsageError
from protocol.transport import connect_quic, serve_quic
from protocol.transport.datagrams import LOOPBACK_DATAGRAM_SIZE, MAX_DATAGRAM_SIZE, datagram_size
from tests.protocol.transport.conftest import hello
from tests.testpki import TestPKI


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.1", "::1", "::ffff:127.0.0.1", "::1%lo"])
def test_a_loopback_peer_gets_the_loopback_size(peer: str) -> None:
    assert datagram_size(peer) == LOOPBACK_DATAGRAM_SIZE
    assert datagram_size(peer, 16000) == 16000  # a larger configured size stays


@pytest.mark.parametrize("peer", ["10.0.0.7", "192.168.1.2", "2001:db8::1", "::ffff:10.0.0.1"])
def test_a_peer_off_this_host_gets_the_configured_size(peer: str) -> None:
    assert datagram_size(peer) == MAX_DATAGRAM_SIZE == 1200
    assert datagram_size(peer, 1400) == 1400


def test_a_name_is_not_taken_for_loopback() -> None:
    assert datagram_size("localhost") == MAX_DATAGRAM_SIZE  # only resolved addresses count
    assert datagram_size("") == MAX_DATAGRAM_SIZE


def test_a_size_below_quics_minimum_is_refused() -> None:
    with pytest.raises(UsageError, match="1199 bytes"):
        datagram_size("127.0.0.1", 1199)


async def test_the_transports_refuse_a_size_below_the_minimum_before_opening(
    pki_ca: TestPKI,
) -> None:
    with pytest.raises(UsageError):
        await serve_quic(
            lambda link: None, "127.0.0.1", 0, credentials=pki_ca.server, max_datagram_size=576
        )
    with pytest.raises(UsageError):
        await connect_quic(
            "127.0.0.1",
            9,
            credentials=pki_ca.node("edge-1"),
            hello=hello(),
            max_datagram_size=576,
        )


def test_loopback_zero_treats_a_local_relay_like_any_path() -> None:
    assert datagram_size("127.0.0.1", 1200, 0) == 1200
    assert datagram_size("127.0.0.1", 1400, 0) == 1400


@pytest.mark.parametrize(("configured", "loopback"), [(16001, 8192), (1200, 16001)])
def test_sizes_beyond_aioquics_long_header_limit_are_refused(configured, loopback) -> None:
    with pytest.raises(UsageError, match="16000"):
        datagram_size("127.0.0.1", configured, loopback)
