"""Send lanes and chunks (protocol.chunking) and the limits agreed at the handshake:
the sans-I/O rules with two sessions pumped in memory, and the reassembler fuzzed."""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import (
    Ack,
    Acked,
    Chunk,
    CloseCode,
    Closed,
    ErrorCode,
    KubeEvent,
    MessageReceived,
    MessageTooLarge,
    ObjectRef,
    ObjectUpsert,
    PeerError,
    Ping,
    Priority,
    Role,
    SendFailed,
    Session,
    SessionConfig,
    SyncDone,
    Welcome,
    decode_payload,
    encode,
)
from protocol.chunking import (
    CHUNK_SIZE,
    MAX_SKIPPED,
    ChunkRefused,
    Limits,
    Reassembler,
    SendQueue,
    agree_limits,
)
from protocol.codec import FrameDecoder
from protocol.errors import DecodeError
from protocol.stream_messages import StreamOpen
from tests.protocol.helpers import POD, ConnectionPair, hello, status

MIB = 1024 * 1024
SYNC = encode(SyncDone(1))[4:]  # a valid payload (one whole message in one chunk)
CM = ObjectRef("ConfigMap", "default", "big", "u-cm")


def configmap(size: int) -> ObjectUpsert:
    return ObjectUpsert(CM, "1", {"kind": "ConfigMap", "data": {"blob": "x" * size}})


def event(size: int) -> KubeEvent:
    return KubeEvent(POD, "Warning", "Big", "m" * size, 1.0)


def open_pair(**kwargs) -> ConnectionPair:
    pair = ConnectionPair(**kwargs)
    pair.handshake()
    pair.take(pair.client)
    pair.take(pair.server)
    return pair


def frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        size = int.from_bytes(data[:4], "big")
        out.append(data[: 4 + size])
        data = data[4 + size :]
    return out


def kinds(data: bytes) -> list[str]:
    decoder = FrameDecoder(64 * MIB)
    decoder.feed(data)
    return [message.kind for _, message in decoder]


# --- the handshake agrees on the limits -------------------------------------------------------


def test_each_side_uses_the_smaller_limits() -> None:
    pair = open_pair(
        client_config=SessionConfig(max_frame_size=4 * MIB, max_message_size=8 * MIB),
        server_config=SessionConfig(max_frame_size=1 * MIB, max_message_size=6 * MIB),
    )
    for side in (pair.client, pair.server):
        assert (side.limits.max_frame_size, side.limits.max_message_size) == (MIB, 6 * MIB)


def test_a_peer_that_announces_no_limits_gets_whole_frames_under_the_default() -> None:
    """An edge from before the negotiation: its hello has no limits (it takes no chunks)."""
    agreed = agree_limits(16 * MIB, 8 * MIB, 0, 0)
    assert (agreed.max_frame_size, agreed.max_message_size, agreed.chunks) == (4 * MIB, 0, False)
    server = Session(Role.SERVER, now=0.0)
    server.receive_data(encode(hello()), 0.0)  # hello() announces nothing: zeros
    [received] = server.events_received()
    server.accept(Welcome(received.version, 0.0, "s", 0, 20.0), 0.0)
    assert server.limits.chunks is False
    with pytest.raises(MessageTooLarge):
        server.send(configmap(5 * MIB), 0.0)
    server.send(configmap(100 * 1024), 0.0)  # under 4 MiB: one whole frame, no chunks
    assert kinds(server.data_to_send()) == ["welcome", "object_upsert"]


def test_invalid_limits_in_a_hello_are_refused() -> None:
    with pytest.raises(ValueError):
        replace(hello(), max_frame_size=-1)
    with pytest.raises(ValueError):
        replace(hello(), max_message_size=2**32)


# --- chunks and lanes -------------------------------------------------------------------------


def test_a_message_larger_than_a_frame_arrives_whole_in_chunks() -> None:
    pair = open_pair(
        client_config=SessionConfig(max_frame_size=64 * 1024),
        server_config=SessionConfig(max_frame_size=64 * 1024),
    )
    big = configmap(3 * MIB)  # 48 x the frame limit
    pair.server.send(big, pair.now)
    data = pair.server.data_to_send()
    assert set(kinds(data)) == {"chunk"} and len(kinds(data)) >= 3 * MIB // CHUNK_SIZE
    pair.client.receive_data(data, pair.now)
    assert pair.client.events_received() == [MessageReceived(None, big)]


def test_an_edge_message_over_the_hub_frame_limit_is_chunked_and_acked() -> None:
    """Issue 15 item 1: hub at 1 MiB, agent at 4 MiB; the event over 1 MiB is delivered."""
    pair = open_pair(
        client_config=SessionConfig(max_frame_size=4 * MIB),
        server_config=SessionConfig(max_frame_size=1 * MIB),
    )
    big = event(2 * MIB)
    seq = pair.client.send(big, pair.now)
    for i in range(10):
        pair.client.send(status(i), pair.now)
    pair.pump()
    received = [e for e in pair.take(pair.server) if isinstance(e, MessageReceived)]
    assert [e.seq for e in received] == list(range(1, 12))
    assert received[0].message == big and seq == 1
    pair.run_until(pair.now + 1.0)  # the delayed ack
    assert Acked(11) in pair.take(pair.client)
    assert pair.client.state is pair.server.state


def test_control_frames_pass_between_the_chunks_of_a_large_message() -> None:
    pair = open_pair()
    pair.server.send(configmap(1 * MIB), pair.now)
    first = pair.server.data_to_send(max_bytes=CHUNK_SIZE)  # one chunk on the wire
    assert kinds(first) == ["chunk"]
    pair.client.receive_data(first, pair.now)
    # Meanwhile the edge pings; the hub's pong leaves before the rest of the ConfigMap.
    pair.client.handle_timer(pair.now + 25.0)
    pair.server.receive_data(pair.client.data_to_send(), pair.now + 25.0)
    later = pair.server.data_to_send(max_bytes=CHUNK_SIZE)
    assert kinds(later)[:2] == ["pong", "chunk"]


def test_status_overtakes_bulk_and_bulk_keeps_its_order() -> None:
    queue = SendQueue(Limits(4 * MIB, 8 * MIB))
    queue.put(encode(configmap(100 * 1024)), Priority.BULK)
    queue.put(encode(SyncDone(1)), Priority.BULK)
    queue.put(encode(status(), 1), Priority.STATUS, 1)
    queue.put(encode(Ping(3)), Priority.CONTROL)
    out = queue.pull()
    decoded = [decode_payload(frame[4:])[1].kind for frame in out]
    assert decoded[:2] == ["ping", "pod_status"]
    assert decoded[2:] == ["chunk"] * len(decoded[2:-1]) + ["sync_done"]
    assert queue.bytes == 0 and queue.backlog(Priority.BULK) == 0


def test_numbered_messages_queued_behind_a_chunked_upsert_wait_for_one_chunk_only() -> None:
    """Issue 15: small numbered messages put while a 1 MiB upsert is half out leave before
    its next chunk, in seq order; the upsert then goes on where it stopped."""
    queue = SendQueue(Limits(4 * MIB, 8 * MIB))
    queue.put(encode(configmap(1 * MIB)), Priority.BULK)
    first = queue.pull(CHUNK_SIZE)
    assert [decode_payload(f[4:])[1].kind for f in first] == ["chunk"]
    for seq in (1, 2, 3):
        queue.put(encode(status(seq), seq), Priority.STATUS, seq)
    out = [decode_payload(f[4:]) for f in queue.pull(CHUNK_SIZE)]
    assert [(seq, m.kind) for seq, m in out[:3]] == [(i, "pod_status") for i in (1, 2, 3)]
    assert [m.kind for _, m in out[3:]] == ["chunk"]
    assert out[3][1].offset == len(decode_payload(first[0][4:])[1].data)  # where it stopped
    assert queue.backlog(Priority.STATUS) == 0 and queue.backlog(Priority.BULK) == 1


def test_the_ack_of_edge_statuses_overtakes_a_configmap_being_chunked() -> None:
    """The hub is sending a 1 MiB ConfigMap (BULK, 64 chunks); the edge's three pod
    statuses (numbered) are acked after one more chunk, not after the ConfigMap."""
    pair = open_pair()
    pair.server.send(configmap(1 * MIB), pair.now)
    pair.client.receive_data(pair.server.data_to_send(max_bytes=CHUNK_SIZE), pair.now)
    seqs = [pair.client.send(status(i), pair.now) for i in range(3)]
    assert seqs == [1, 2, 3]
    pair.server.receive_data(pair.client.data_to_send(), pair.now)
    assert [type(e) for e in pair.server.events_received()] == [MessageReceived] * 3
    pair.server.handle_timer(pair.now + 1.0)  # the delayed ack is due
    out = pair.server.data_to_send(max_bytes=CHUNK_SIZE)
    assert kinds(out) == ["ack", "chunk"]
    pair.client.receive_data(out, pair.now + 1.0)
    assert pair.client.events_received() == [Acked(3)]  # the ConfigMap is not in yet
    assert pair.client.unacked() == [] and pair.server.bytes_to_send > 900 * 1024


def test_a_pod_status_behind_a_large_numbered_event_keeps_its_seq_order() -> None:
    """The limit of the lanes: a 1 MiB event is numbered (the STATUS lane) and chunked; a
    pod status sent after it does not overtake its chunks, since the receiver's cumulative
    ack takes seqs in order (a later seq first would make the event a duplicate). Both
    arrive in order and are acked."""
    pair = open_pair()
    assert pair.client.send(event(1 * MIB), pair.now) == 1
    first = pair.client.data_to_send(max_bytes=CHUNK_SIZE)
    assert pair.client.send(status(), pair.now) == 2
    second = pair.client.data_to_send(max_bytes=CHUNK_SIZE)
    assert kinds(first) == kinds(second) == ["chunk"]
    pair.server.receive_data(first + second, pair.now)
    pair.pump()
    received = [e for e in pair.take(pair.server) if isinstance(e, MessageReceived)]
    assert [(e.seq, e.message.kind) for e in received] == [(1, "event"), (2, "pod_status")]
    pair.run_until(pair.now + 1.0)
    assert Acked(2) in pair.take(pair.client)


def test_pull_with_no_budget_takes_only_control_frames() -> None:
    queue = SendQueue(Limits(4 * MIB, 8 * MIB))
    queue.put(encode(status(), 1), Priority.STATUS, 1)
    queue.put(encode(Ack(3)), Priority.CONTROL)
    assert [decode_payload(f[4:])[1] for f in queue.pull(0)] == [Ack(3)]
    assert queue.backlog(Priority.STATUS) == 1 and queue.bytes > 0


def test_a_message_over_the_agreed_message_limit_is_refused_at_send() -> None:
    pair = open_pair(server_config=SessionConfig(max_message_size=2 * MIB))
    with pytest.raises(MessageTooLarge) as caught:
        pair.client.send(event(3 * MIB), pair.now)
    assert caught.value.limit == 2 * MIB
    assert pair.client.next_seq == 1  # no seq used: nothing blocks what follows
    assert pair.client.send(status(), pair.now) == 1


def test_a_receiver_refuses_a_chunked_message_over_its_limit_and_goes_on() -> None:
    """A message over what the receiver reassembles (a peer that ignored the agreed limit):
    error TOO_LARGE naming its seq, the seq acked, the session and what follows go on."""
    pair = open_pair()
    strict = Reassembler(max_message_size=20_000)
    pair.server._reassembler = strict  # stricter than the hub announced
    pair.client.send(status(0), pair.now)
    pair.client.send(event(40_000), pair.now)  # seq 2, cut into chunks
    pair.client.send(status(3), pair.now)
    pair.pump()
    delivered = [e.seq for e in pair.take(pair.server) if isinstance(e, MessageReceived)]
    assert delivered == [1, 3]
    [error] = [e for e in pair.take(pair.client) if isinstance(e, PeerError)]
    assert error.error.code is ErrorCode.TOO_LARGE and error.error.in_reply_to == 2
    assert "20000-byte limit" in error.error.message and strict.reserved == 0
    pair.run_until(pair.now + 1.0)  # the delayed ack covers the refused seq too
    assert Acked(3) in pair.take(pair.client) and pair.client.unacked() == []


def test_a_pending_message_that_no_longer_fits_is_reported_not_resent() -> None:
    pair = ConnectionPair(server_config=SessionConfig(max_message_size=1 * MIB), next_seq=3)
    big = event(2 * MIB)
    pair.handshake(pending=[(1, big), (2, status())])
    failed = [e for e in pair.client_events if isinstance(e, SendFailed)]
    assert [(e.seq, e.error.limit) for e in failed] == [(1, MIB)]
    assert [seq for seq, _ in pair.client.unacked()] == [2]
    delivered = [e.seq for e in pair.server_events if isinstance(e, MessageReceived)]
    assert delivered == [2]


@pytest.mark.parametrize(
    ("chunks", "words"),
    [
        ([Chunk(1, 10, 100, b"x" * 10)], "starts at 10"),
        ([Chunk(1, 0, 100, b"x" * 10), Chunk(1, 20, 100, b"x" * 10)], "offset 20"),
        ([Chunk(1, 0, 100, b"x" * 10), Chunk(1, 10, 90, b"x" * 10)], "offset 10"),
        ([Chunk(5, 0, len(SYNC), SYNC), Chunk(5, 0, len(SYNC), SYNC)], "not new"),
    ],
)
def test_chunks_that_break_the_rules_close_the_session(chunks: list[Chunk], words: str) -> None:
    pair = open_pair()
    for chunk in chunks:
        pair.client.receive_data(encode(chunk), pair.now)
    closed = [e for e in pair.client.events_received() if isinstance(e, Closed)]
    assert closed and closed[0].code is CloseCode.PROTOCOL_ERROR, closed
    assert words in closed[0].reason


def test_a_chunk_inside_a_chunk_is_a_protocol_error() -> None:
    pair = open_pair()
    inner = encode(Chunk(1, 0, 4, b"abcd"))[4:]
    pair.client.receive_data(encode(Chunk(2, 0, len(inner), inner)), pair.now)
    [closed] = [e for e in pair.client.events_received() if isinstance(e, Closed)]
    assert "chunk inside" in closed.reason


def test_bad_chunk_fields_do_not_construct() -> None:
    for bad in (
        {"id": -1, "offset": 0, "total": 1, "data": b"x"},
        {"id": 1, "offset": 0, "total": 0, "data": b"x"},
        {"id": 1, "offset": 5, "total": 5, "data": b"x"},
        {"id": 1, "offset": 0, "total": 5, "data": b""},
        {"id": 1, "offset": 0, "total": 5, "data": b"x", "seq": -1},
    ):
        with pytest.raises(ValueError):
            Chunk(**bad)


def test_reassembly_memory_is_bounded() -> None:
    r = Reassembler(max_message_size=1000, budget=1500)
    assert r.feed(Chunk(1, 0, 1000, b"a" * 10)) is None
    with pytest.raises(ChunkRefused) as caught:  # 1000 + 1000 > 1500: refused before buffering
        r.feed(Chunk(2, 0, 1000, b"b" * 10, seq=4))
    assert caught.value.seq == 4 and "budget" in caught.value.reason
    assert r.reserved == 1000
    assert r.feed(Chunk(2, 10, 1000, b"b" * 990)) is None  # the refused one's rest: skipped
    assert r.feed(Chunk(1, 10, 1000, b"a" * 990)) == b"a" * 1000
    assert r.reserved == 0


def test_refused_messages_left_unfinished_are_bounded() -> None:
    r = Reassembler(max_message_size=10)
    for cid in range(MAX_SKIPPED):
        with pytest.raises(ChunkRefused):
            r.feed(Chunk(cid, 0, 100, b"x"))
    with pytest.raises(DecodeError):
        r.feed(Chunk(MAX_SKIPPED, 0, 100, b"x"))


# --- fuzz ---------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 50_000), min_size=1, max_size=6),
    lanes=st.lists(st.sampled_from(list(Priority)), min_size=6, max_size=6),
    budgets=st.lists(st.integers(0, 40_000), min_size=1, max_size=30),
)
def test_any_interleaving_of_lanes_reassembles_every_message(sizes, lanes, budgets) -> None:
    queue = SendQueue(Limits(20_000, 1 << 20), chunk_size=4_000)
    sent = []
    for i, size in enumerate(sizes):
        message = KubeEvent(POD, "Normal", "R", "z" * size, float(i))
        lane = lanes[i] if lanes[i] is not Priority.CONTROL else Priority.BULK
        queue.put(encode(message, i + 1), lane, i + 1)
        sent.append((lane, i + 1, message))
    r = Reassembler(max_message_size=1 << 20)
    got = []
    for budget in [*budgets, None]:
        for frame in queue.pull(budget):
            assert len(frame) - 4 <= 20_000
            seq, message = decode_payload(frame[4:])
            if isinstance(message, Chunk):
                whole = r.feed(message)
                if whole is None:
                    continue
                seq, message = decode_payload(whole)
            got.append((seq, message))
    assert queue.bytes == 0 and r.reserved == 0
    assert sorted(got, key=lambda x: x[0]) == [(seq, m) for _, seq, m in sent]
    for lane in (Priority.STATUS, Priority.BULK):  # order within a lane is kept
        order = [seq for seq, _ in got if any(s == seq and ln is lane for ln, s, _ in sent)]
        assert order == sorted(order)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),
            st.integers(0, 300),
            st.integers(1, 300),
            st.binary(min_size=1, max_size=80),
        ),
        max_size=40,
    )
)
def test_the_reassembler_never_holds_more_than_its_budget(chunks) -> None:
    r = Reassembler(max_message_size=200, budget=300)
    for cid, offset, total, data in chunks:
        if offset + len(data) > total:
            continue
        try:
            whole = r.feed(Chunk(cid, offset, total, data))
        except (ChunkRefused, DecodeError):
            continue
        assert whole is None or len(whole) <= 200
        assert 0 <= r.reserved <= 300


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.integers(1, 300))
def test_random_bytes_after_chunks_never_raise_out_of_the_session(noise, cut) -> None:
    pair = open_pair()
    pair.server.send(configmap(40_000), pair.now)
    data = pair.server.data_to_send() + noise
    for start in range(0, len(data), cut):
        pair.client.receive_data(data[start : start + cut], pair.now)
    events = pair.client.events_received()
    assert all(isinstance(e, (MessageReceived, Closed, PeerError)) for e in events)


def test_a_control_message_over_the_chunk_size_is_chunked_and_arrives() -> None:
    """Regression (break1): an exec's stream_open (CONTROL) with a 20 KB command line was
    chunked into the CONTROL lane and ``pull()`` failed with a TypeError on the chunk."""
    pair = open_pair()
    command = ["sh", "-c", "echo " + "x" * (CHUNK_SIZE + 4000)]
    opened = StreamOpen(1, "exec", "default", "web-0", "c", 256 * 1024, {"command": command})
    pair.server.send(opened, pair.now)
    pair.server.send(configmap(3 * CHUNK_SIZE), pair.now)  # bulk queued behind it, chunked too
    data = pair.server.data_to_send(0)  # control only: the whole stream_open, in chunks
    assert set(kinds(data)) == {"chunk"}
    pair.client.receive_data(data, pair.now)
    assert pair.client.events_received() == [MessageReceived(None, opened)]
    pair.client.receive_data(pair.server.data_to_send(), pair.now)
    [received] = pair.client.events_received()
    assert received.message == configmap(3 * CHUNK_SIZE)


@pytest.mark.parametrize("frame_limit", [1, 97, 100, 1023])
def test_a_hello_announcing_a_tiny_frame_limit_closes_the_session(frame_limit: int) -> None:
    """Regression (break1): a hello announcing ``max_frame_size`` 1 was accepted and every
    hub message then failed with MessageTooLarge; at 100 bytes chunks were 4 bytes and a
    pong was chunked into the control lane (TypeError in ``data_to_send``)."""
    with pytest.raises(ValueError, match="at least 1024 bytes"):
        replace(hello(), max_frame_size=frame_limit)
    body = msgpack.unpackb(encode(replace(hello(), max_frame_size=4096))[4:])
    body["b"]["max_frame_size"] = frame_limit
    payload = msgpack.packb(body)
    server = Session(Role.SERVER, now=0.0)
    server.receive_data(len(payload).to_bytes(4, "big") + payload, 0.0)
    [closed] = server.events_received()
    assert isinstance(closed, Closed) and closed.code is CloseCode.PROTOCOL_ERROR
    assert "max_frame_size" in closed.reason
    assert kinds(server.data_to_send()) == ["close"]


def test_the_smallest_frame_limit_still_carries_control_messages_and_chunks() -> None:
    pair = open_pair(
        client_config=SessionConfig(max_frame_size=1024),
        server_config=SessionConfig(max_frame_size=1024),
    )
    command = ["sh", "-c", "x" * 3000]
    opened = StreamOpen(1, "exec", "default", "web-0", "c", 256 * 1024, {"command": command})
    pair.server.send(opened, pair.now)
    data = pair.server.data_to_send()
    assert max(len(frame) for frame in frames(data)) <= 1024 + 4
    pair.client.receive_data(data, pair.now)
    assert pair.client.events_received() == [MessageReceived(None, opened)]
