"""SPDY header zlib streams without state between blocks (protocol.spdy.headerzlib)."""

from __future__ import annotations

import gc
import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.spdy.connection import SpdyConnection, SpdyProtocolError
from protocol.spdy.dictionary import HEADER_DICTIONARY
from protocol.spdy.headerzlib import HeaderBlockError, HeaderDeflater, HeaderInflater


def _live_deflater() -> zlib._Compress:
    # what the peer (Go's compress/zlib in spdystream) keeps: one stream for the connection
    return zlib.compressobj(
        zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, 8, zdict=HEADER_DICTIONARY
    )


def _blocks(count: int) -> list[bytes]:
    return [
        b"\x00\x00\x00\x02\x00\x00\x00\nstreamtype\x00\x00\x00\x05stdin"
        + f"x-stream-{i}".encode() * (i % 7)
        for i in range(count)
    ]


def test_the_inflater_reads_a_live_peer_stream_and_keeps_no_state_under_the_limit() -> None:
    peer = _live_deflater()
    inflater = HeaderInflater(64 << 10)
    for raw in _blocks(12):
        block = peer.compress(raw) + peer.flush(zlib.Z_SYNC_FLUSH)
        assert inflater.inflate(block) == raw
        assert not inflater.holds_state


def test_past_the_replay_limit_the_inflater_keeps_its_stream_and_stays_correct() -> None:
    peer = _live_deflater()
    inflater = HeaderInflater(64 << 10, replay_limit=200)
    states = []
    for raw in _blocks(40):
        block = peer.compress(raw) + peer.flush(zlib.Z_SYNC_FLUSH)
        assert inflater.inflate(block) == raw
        states.append(inflater.holds_state)
    assert states[0] is False and states[-1] is True


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=30), st.integers(0, 2000))
def test_the_deflater_emits_exactly_what_a_live_stream_emits(blocks, limit) -> None:
    live = zlib.compressobj(
        zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 9, 1, zdict=HEADER_DICTIONARY
    )
    ours = HeaderDeflater(replay_limit=limit)
    peer = zlib.decompressobj(zdict=HEADER_DICTIONARY)
    for raw in blocks:
        expected = live.compress(raw) + live.flush(zlib.Z_SYNC_FLUSH)
        block = ours.deflate(raw)
        assert block == expected
        assert peer.decompress(block) == raw


def test_a_block_that_does_not_inflate_is_refused() -> None:
    with pytest.raises(HeaderBlockError, match="does not inflate"):
        HeaderInflater(1024).inflate(b"\xff" * 40)


def test_a_bomb_is_refused_also_when_replaying() -> None:
    peer = _live_deflater()
    inflater = HeaderInflater(4096)
    first = _blocks(1)[0]
    assert inflater.inflate(peer.compress(first) + peer.flush(zlib.Z_SYNC_FLUSH)) == first
    bomb = peer.compress(bytes(1 << 20)) + peer.flush(zlib.Z_SYNC_FLUSH)
    with pytest.raises(HeaderBlockError, match="over 4096 bytes"):
        inflater.inflate(bomb)


def test_the_connection_turns_a_bad_block_into_a_protocol_error() -> None:
    server = SpdyConnection(server=True)
    # SYN_STREAM, stream 1, with a header block that is not zlib
    payload = (1).to_bytes(4, "big") + bytes(6) + b"\xff" * 20
    frame = b"\x80\x03\x00\x01\x00" + len(payload).to_bytes(3, "big") + payload
    with pytest.raises(SpdyProtocolError, match="does not inflate"):
        server.receive_data(frame)


def _exec_handshake() -> tuple[SpdyConnection, SpdyConnection]:
    client, server = SpdyConnection(server=False), SpdyConnection(server=True)
    for kind in ("error", "stdin", "stdout", "stderr", "resize"):
        client.open_stream({"streamtype": [kind]})
    for event in server.receive_data(client.data_to_send()):
        server.reply(event.stream_id)  # type: ignore[union-attr]
    client.receive_data(server.data_to_send())
    return client, server


def test_an_idle_exec_connection_holds_no_zlib_state() -> None:
    """What an idle ``kubectl exec`` costs the hub in header state, measured with
    tracemalloc (zlib allocates through PyMem_RawMalloc, which it traces)."""
    _exec_handshake()  # warm caches
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [_exec_handshake()[1] for _ in range(50)]
        gc.collect()
        per_connection = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    # the zlib objects alone were ~45 KiB a connection (32 KiB inflate window + state)
    assert per_connection < 8 * 1024, per_connection
