"""The stream multiplexer (protocol/streams.py): credit flow control both ways, bounded
receive buffers, and a peer that breaks the rules loses only its stream."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode, UsageError
from protocol.stream_messages import (
    MAX_STREAM_CHUNK,
    StreamClose,
    StreamData,
    StreamOpen,
    StreamReset,
    StreamWindow,
)
from protocol.streams import (
    DataReceived,
    FlowControlError,
    StreamEnded,
    StreamMux,
    StreamOpened,
    WindowOpened,
)

WINDOW = 2 * MAX_STREAM_CHUNK


def opened(window: int = WINDOW) -> tuple[StreamMux, StreamMux, int]:
    hub, edge = StreamMux(hub=True, window=window), StreamMux(hub=False, window=window)
    message = hub.open("logs", "default", "web-0", "app", {"follow": True}, user="alice")
    events, replies = edge.receive(message)
    assert events == [StreamOpened(message.stream_id, message)]
    assert replies == [StreamWindow(stream_id=message.stream_id, credit=window)]
    for reply in replies:
        assert hub.receive(reply) == ([WindowOpened(message.stream_id)], [])
    return hub, edge, message.stream_id


def test_open_grants_both_windows() -> None:
    hub, edge, sid = opened()
    assert edge.credit(sid) == WINDOW and hub.credit(sid) == WINDOW
    assert sid in hub and sid in edge and len(hub) == 1


def test_the_edge_cannot_send_beyond_the_window_until_the_reader_consumes() -> None:
    hub, edge, sid = opened()
    chunk = b"x" * MAX_STREAM_CHUNK
    for _ in range(2):
        events, _ = hub.receive(edge.data(sid, 1, chunk))
        assert events == [DataReceived(sid, 1, chunk, False)]
    assert edge.credit(sid) == 0
    with pytest.raises(FlowControlError):
        edge.data(sid, 1, b"y")
    # the reader takes one chunk: half the window is free, credit goes back
    grant = hub.consumed(sid, MAX_STREAM_CHUNK)
    assert grant == StreamWindow(stream_id=sid, credit=MAX_STREAM_CHUNK)
    edge.receive(grant)
    assert edge.credit(sid) == MAX_STREAM_CHUNK


def test_small_reads_send_credit_only_past_half_the_window() -> None:
    hub, edge, sid = opened()
    hub.receive(edge.data(sid, 1, b"a" * 1000))
    assert hub.consumed(sid, 1000) is None  # 1000 bytes out of 128 KiB: not worth a message
    with pytest.raises(UsageError):
        hub.consumed(sid, 1)


def test_data_beyond_the_window_resets_only_that_stream() -> None:
    hub, edge, sid = opened()
    other = hub.open("logs", "default", "web-1", "app")
    edge.receive(other)
    flood = [StreamData(stream_id=sid, channel=1, data=b"z" * MAX_STREAM_CHUNK)] * 3
    hub.receive(flood[0])
    hub.receive(flood[1])
    events, replies = hub.receive(flood[2])
    assert events == [
        StreamEnded(
            sid,
            code=ErrorCode.INVALID_MESSAGE,
            reason="data beyond the stream's window",
            by_peer=False,
        )
    ]
    assert replies == [
        StreamReset(
            stream_id=sid, code=ErrorCode.INVALID_MESSAGE, reason="data beyond the stream's window"
        )
    ]
    assert sid not in hub and other.stream_id in hub


def test_bad_opens_and_closes_are_refused() -> None:
    hub, edge, sid = opened()
    # a reused id
    again = StreamOpen(
        stream_id=sid, operation="logs", namespace="d", pod="p", container="c", window=WINDOW
    )
    events, replies = edge.receive(again)
    assert events[0].code is ErrorCode.INVALID_MESSAGE and sid not in edge
    assert replies[0].code is ErrorCode.INVALID_MESSAGE
    # the edge never opens toward the hub
    _, replies = hub.receive(again)
    assert replies == [
        StreamReset(stream_id=sid, code=ErrorCode.FORBIDDEN, reason="only the hub opens streams")
    ]
    with pytest.raises(UsageError):
        edge.open("logs", "d", "p", "c")
    with pytest.raises(UsageError):
        hub.close(sid)
    # the hub never sends stream_close
    edge2 = StreamMux(hub=False)
    edge2.receive(
        StreamOpen(
            stream_id=5, operation="logs", namespace="d", pod="p", container="c", window=WINDOW
        )
    )
    events, _ = edge2.receive(StreamClose(stream_id=5))
    assert events[0].code is ErrorCode.INVALID_MESSAGE


def test_too_many_streams() -> None:
    edge = StreamMux(hub=False, max_streams=1)
    hub = StreamMux(hub=True, max_streams=1)
    edge.receive(hub.open("logs", "d", "p", "c"))
    with pytest.raises(UsageError):
        hub.open("logs", "d", "p", "c")
    events, replies = edge.receive(
        StreamOpen(stream_id=9, operation="logs", namespace="d", pod="p", container="c", window=1)
    )
    assert events == [] and replies[0].code is ErrorCode.RATE_LIMITED


def test_close_and_late_messages() -> None:
    hub, edge, sid = opened()
    events, _ = hub.receive(edge.close(sid, exit_code=3))
    assert events == [StreamEnded(sid, exit_code=3)]
    # data that crossed the close on the wire is dropped quietly
    assert hub.receive(StreamData(stream_id=sid, channel=1, data=b"late")) == ([], [])
    assert hub.consumed(sid, 0) is None and hub.credit(sid) == 0


def test_ids_are_not_reused_while_open() -> None:
    hub = StreamMux(hub=True)
    first = hub.open("logs", "d", "p", "c").stream_id
    hub._next_id = first  # as after wrapping around 2**32-1
    assert hub.open("logs", "d", "p", "c").stream_id != first


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["send", "consume", "bogus_data", "bogus_window"]),
            st.integers(min_value=0, max_value=3 * MAX_STREAM_CHUNK),
        ),
        max_size=60,
    )
)
def test_buffers_stay_within_the_window_whatever_the_peer_does(ops) -> None:
    """Any mix of honest sends, reads and rule-breaking messages: the receiver never holds
    more than its window, never raises, and a broken rule ends the stream with a reset."""
    hub, edge, sid = opened()
    buffered = 0
    for op, n in ops:
        if sid not in hub:
            break
        if op == "send":
            size = min(n, MAX_STREAM_CHUNK, edge.credit(sid))
            message = edge.data(sid, 1, b"d" * size)
        elif op == "consume":
            take = min(n, buffered)
            grant = hub.consumed(sid, take)
            buffered -= take
            if grant is not None:
                edge.receive(grant)
            continue
        elif op == "bogus_data":
            message = StreamData(stream_id=sid, channel=2, data=b"b" * min(n, MAX_STREAM_CHUNK))
        else:
            message = StreamWindow(stream_id=sid, credit=n + 1)
            edge.receive(message)
            continue
        events, replies = hub.receive(message)
        for event in events:
            if isinstance(event, DataReceived):
                buffered += len(event.data)
            else:
                assert isinstance(event, StreamEnded) and event.code is ErrorCode.INVALID_MESSAGE
                assert replies and replies[0].stream_id == sid
        assert buffered <= WINDOW
