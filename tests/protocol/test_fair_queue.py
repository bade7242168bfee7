"""The BULK lane's flows (protocol.chunking.SendQueue): day-2 streams take turns, one
message each, so a small message of one stream never waits behind another stream's
backlog; each flow keeps its order; the session's close leaves last. Sans-I/O: queues
and two sessions pumped in memory, and the interleavings fuzzed."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import Chunk, CloseCode, Closed, KubeEvent, Priority, decode_payload, encode
from protocol.chunking import CHUNK_SIZE, Limits, Reassembler, SendQueue
from protocol.events import MessageReceived
from protocol.stream_messages import MAX_STREAM_CHUNK, StreamClose, StreamData
from tests.protocol.helpers import POD, ConnectionPair

MIB = 1024 * 1024


def data(stream_id: int, size: int, n: int = 0) -> StreamData:
    return StreamData(stream_id=stream_id, channel=1, data=bytes([n % 256]) * size)


def put(queue: SendQueue, message, flow=None) -> None:
    queue.put(encode(message, None), message.priority, flow=flow)


def pulled(queue: SendQueue, budget: int | None) -> list:
    return [decode_payload(frame[4:])[1] for frame in queue.pull(budget)]


def test_a_small_message_of_one_stream_passes_another_streams_backlog() -> None:
    queue = SendQueue(Limits(4 * MIB, 8 * MIB))
    for n in range(16):  # a followed log: 256 KiB queued
        put(queue, data(1, MAX_STREAM_CHUNK, n), flow=1)
    put(queue, data(2, 1), flow=2)  # the exec's echo, after all of it
    first = pulled(queue, 1)
    second = pulled(queue, 1)
    assert first == [data(1, MAX_STREAM_CHUNK, 0)]
    assert second == [data(2, 1)]  # the next turn: one message of the log ahead, not 16
    rest = pulled(queue, None)
    assert rest == [data(1, MAX_STREAM_CHUNK, n) for n in range(1, 16)]
    assert queue.bytes == 0 and queue.flow_bytes(1) == 0 and queue.backlog(Priority.BULK) == 0


def test_flows_count_their_own_bytes() -> None:
    queue = SendQueue(Limits(4 * MIB, 8 * MIB))
    put(queue, data(1, 1000), flow=1)
    put(queue, data(1, 1000), flow=1)
    put(queue, data(2, 10), flow=2)
    one, two = len(encode(data(1, 1000), None)), len(encode(data(2, 10), None))
    assert queue.flow_bytes(1) == 2 * one and queue.flow_bytes(2) == two
    assert queue.flow_bytes(3) == 0 and queue.bytes == 2 * one + two
    pulled(queue, 1)
    assert queue.flow_bytes(1) == one and queue.flow_bytes(2) == two
    pulled(queue, 1)
    assert queue.flow_bytes(2) == 0


def test_a_full_stream_data_goes_as_one_frame_not_as_chunks() -> None:
    queue = SendQueue(Limits(4 * MIB, 8 * MIB))
    message = data(7, MAX_STREAM_CHUNK)
    assert len(encode(message, None)) - 4 > CHUNK_SIZE  # its envelope is over the chunk size
    put(queue, message, flow=7)
    assert pulled(queue, 1) == [message]


def test_a_chunked_message_is_finished_before_the_turn_passes() -> None:
    # A tiny frame limit: even stream data is chunked. The receiver reassembles one
    # message per lane at a time, so the lane's turns are per message, not per chunk.
    queue = SendQueue(Limits(2_000, 1 * MIB))
    put(queue, data(1, 5_000), flow=1)
    put(queue, data(2, 5_000), flow=2)
    r = Reassembler(max_message_size=MIB)
    order, started = [], []
    for message in pulled(queue, None):
        assert isinstance(message, Chunk)
        if message.offset == 0:
            started.append(message.id)
        whole = r.feed(message)
        if whole is not None:
            order.append(decode_payload(whole)[1].stream_id)
        assert len(started) - len(order) <= 1  # never two messages in progress
    assert order == [1, 2]


def test_the_session_close_leaves_after_every_streams_data() -> None:
    pair = ConnectionPair()
    pair.handshake()
    pair.take(pair.client)
    pair.take(pair.server)
    for n in range(3):
        pair.client.send(data(1, 4096, n), pair.now)
        pair.client.send(data(2, 4096, n), pair.now)
    pair.client.send(StreamClose(stream_id=2, exit_code=0), pair.now)
    pair.client.close(CloseCode.NORMAL, "done", pair.now)
    out = pair.client.data_to_send(1)  # one frame at a time
    while more := pair.client.data_to_send(1):
        out += more
    pair.server.receive_data(out, pair.now)
    events = pair.server.events_received()
    got = [e.message for e in events if isinstance(e, MessageReceived)]
    assert [m.stream_id for m in got] == [1, 2, 1, 2, 1, 2, 2]
    assert isinstance(got[-1], StreamClose)  # in its stream's order, after its data
    closed = [i for i, e in enumerate(events) if isinstance(e, Closed)]
    assert closed and closed[0] > max(
        i for i, e in enumerate(events) if isinstance(e, MessageReceived)
    )


def test_a_session_sends_stream_data_by_turns() -> None:
    pair = ConnectionPair()
    pair.handshake()
    pair.take(pair.client)
    pair.take(pair.server)
    for n in range(8):
        pair.client.send(data(1, MAX_STREAM_CHUNK, n), pair.now)
    pair.client.send(data(2, 1), pair.now)
    assert pair.client.flow_bytes(2) == len(encode(data(2, 1), None))
    first = pair.client.data_to_send(MAX_STREAM_CHUNK) + pair.client.data_to_send(1)
    pair.server.receive_data(first, pair.now)
    got = [e.message for e in pair.server.events_received() if isinstance(e, MessageReceived)]
    assert [m.stream_id for m in got] == [1, 2]
    assert pair.client.flow_bytes(2) == 0


# --- fuzz ---------------------------------------------------------------------------------

_ACTIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from([Priority.STATUS, Priority.BULK]),
            st.sampled_from([None, 1, 2, 3]),
            st.integers(1, 30_000),
        ),
        st.tuples(st.just("pull"), st.integers(0, 40_000)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=_ACTIONS, chunked=st.booleans())
def test_any_interleaving_of_flows_keeps_each_flows_order(actions, chunked) -> None:
    queue = SendQueue(Limits(20_000, 1 << 20) if chunked else Limits(64_000, 0), chunk_size=4_000)
    sent: dict[tuple, list[int]] = {}
    r = Reassembler(max_message_size=1 << 20)
    got: dict[tuple, list[int]] = {}
    where: dict[int, tuple] = {}
    open_chunks: set[int] = set()
    n = 0

    def receive(budget: int | None) -> None:
        for frame in queue.pull(budget):
            seq, message = decode_payload(frame[4:])
            if isinstance(message, Chunk):
                open_chunks.add(message.id)
                assert len(open_chunks) <= 2  # one message in progress per lane at most
                whole = r.feed(message)
                if whole is None:
                    continue
                open_chunks.discard(message.id)
                seq, message = decode_payload(whole)
            got.setdefault(where[seq], []).append(seq)

    for action in actions:
        if action[0] == "pull":
            receive(action[1])
            continue
        _, lane, flow, size = action
        n += 1
        key = (lane, flow if lane is Priority.BULK else None)
        where[n] = key
        sent.setdefault(key, []).append(n)
        message = KubeEvent(POD, "Normal", "R", "z" * size, float(n))
        queue.put(encode(message, n), lane, n, flow=flow)
    receive(None)
    assert got == sent  # everything arrived, each flow (and STATUS) in its order
    assert queue.bytes == 0 and r.reserved == 0
    assert all(queue.flow_bytes(f) == 0 for f in (None, 1, 2, 3))
