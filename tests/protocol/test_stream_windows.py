"""Stream windows that grow where credit's round trip limits a stream (protocol/streams.py),
and never for a slow reader."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode, UsageError
from protocol.stream_messages import MAX_STREAM_CHUNK, StreamData, StreamWindow
from protocol.streams import StreamMux

CHUNK = MAX_STREAM_CHUNK
WINDOW = 2 * CHUNK


def _open(hub: StreamMux, edge: StreamMux) -> int:
    message = hub.open("logs", "default", "web-0", "app", {"follow": True})
    _, replies = edge.receive(message)
    for reply in replies:
        hub.receive(reply)
    return message.stream_id


def _pair(**hub_options) -> tuple[StreamMux, StreamMux, int]:
    hub, edge = StreamMux(hub=True, window=WINDOW, **hub_options), StreamMux(hub=False)
    return hub, edge, _open(hub, edge)


def _credit_limited_round(hub: StreamMux, edge: StreamMux, sid: int) -> list:
    """The edge sends its whole credit; the hub's reader takes each chunk at once, but its
    grants reach the edge only after the edge ran out (a long credit round trip)."""
    in_flight, replies = [], []
    while edge.credit(sid):
        data = edge.data(sid, 1, b"x" * min(CHUNK, edge.credit(sid)))
        _, back = hub.receive(data)
        replies += back
        grant = hub.consumed(sid, len(data.data))
        if grant is not None:
            in_flight.append(grant)
    for grant in in_flight + replies:
        edge.receive(grant)
    return replies


def test_the_chunk_that_uses_the_last_credit_says_so() -> None:
    _, edge, sid = _pair()
    first = edge.data(sid, 1, b"x" * CHUNK)
    last = edge.data(sid, 1, b"x" * CHUNK)
    assert (first.blocked, last.blocked) == (False, True)
    assert StreamData(stream_id=1, channel=1, data=b"x").blocked is False  # older peers


def test_a_window_limited_by_credit_round_trips_doubles() -> None:
    hub, edge, sid = _pair(max_window=8 * CHUNK)
    replies = _credit_limited_round(hub, edge, sid)
    assert replies == [StreamWindow(stream_id=sid, credit=WINDOW)]  # the extra credit, at once
    assert hub.window_of(sid) == 2 * WINDOW
    sizes = []
    for _ in range(4):
        _credit_limited_round(hub, edge, sid)
        sizes.append(hub.window_of(sid))
    assert sizes == [8 * CHUNK] * 4  # doubled to max_window, then no further


def test_a_slow_reader_never_grows_the_window_or_the_memory() -> None:
    hub, edge, sid = _pair(max_window=64 * CHUNK)
    for _ in range(50):
        held = 0
        while edge.credit(sid):  # the reader reads nothing until the sender is blocked
            data = edge.data(sid, 1, b"x" * min(CHUNK, edge.credit(sid)))
            _, replies = hub.receive(data)
            assert replies == []
            held += len(data.data)
        assert held <= WINDOW  # all the hub ever holds for the stream
        grants = [hub.consumed(sid, CHUNK) for _ in range(held // CHUNK)]
        for grant in grants:
            if grant is not None:
                edge.receive(grant)
    assert hub.window_of(sid) == WINDOW and hub.grown == 0


def test_the_growth_budget_bounds_all_streams_together_and_comes_back() -> None:
    hub, edge = (
        StreamMux(hub=True, window=WINDOW, max_window=16 * CHUNK, growth_budget=3 * WINDOW),
        StreamMux(hub=False),
    )
    first, second = _open(hub, edge), _open(hub, edge)
    for _ in range(4):
        _credit_limited_round(hub, edge, first)
        _credit_limited_round(hub, edge, second)
    assert hub.grown == 3 * WINDOW
    assert hub.window_of(first) + hub.window_of(second) == 2 * WINDOW + 3 * WINDOW
    hub.reset(first, code=ErrorCode.INTERNAL)
    assert hub.grown == hub.window_of(second) - WINDOW  # the first's growth is free again
    assert hub.reset_all() == [second] and hub.grown == 0


@pytest.mark.parametrize("max_window", [CHUNK, 2**31])
def test_a_max_window_below_the_window_or_absurd_is_refused(max_window: int) -> None:
    with pytest.raises(UsageError, match="max_window"):
        StreamMux(hub=True, window=WINDOW, max_window=max_window)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["send", "read", "deliver"]), max_size=400))
def test_whatever_the_interleaving_the_receive_buffer_stays_within_the_window(steps) -> None:
    hub, edge, sid = _pair(max_window=8 * CHUNK, growth_budget=6 * CHUNK)
    received: list[int] = []
    wire: list[StreamWindow] = []  # credit on its way to the edge
    held = 0
    for step in steps:
        if step == "send" and edge.credit(sid):
            data = edge.data(sid, 1, b"x" * min(CHUNK, edge.credit(sid)))
            events, replies = hub.receive(data)
            assert events and all(isinstance(r, StreamWindow) for r in replies)
            wire += replies
            received.append(len(data.data))
            held += len(data.data)
        elif step == "read" and received:
            size = received.pop(0)
            held -= size
            grant = hub.consumed(sid, size)
            if grant is not None:
                wire.append(grant)
        elif step == "deliver" and wire:
            edge.receive(wire.pop(0))
        assert held <= hub.window_of(sid) <= 8 * CHUNK
        assert hub.grown <= 6 * CHUNK
        assert sid in hub  # never a violation: the sender only uses the credit it has
