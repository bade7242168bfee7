"""``SessionConfig(manual_ack=True)``: the receiver acks only what the application released.

The hub uses it so that an edge message is acknowledged only once its effect is durable in
the Kubernetes API; everything not released stays unacknowledged on the edge and is resent
after a reconnect.
"""

from __future__ import annotations

import msgpack
import pytest

from protocol import (
    Ack,
    Acked,
    Close,
    CloseCode,
    MessageReceived,
    SessionConfig,
    SettingsError,
    UsageError,
    encode,
)
from protocol.codec import FrameDecoder
from tests.protocol.helpers import ConnectionPair, status

MANUAL = SessionConfig(manual_ack=True, ack_delay=0.5, ack_every=100)


def frames(data: bytes) -> list:
    decoder = FrameDecoder()
    decoder.feed(data)
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame[1])
    return out


def open_pair(server_config: SessionConfig = MANUAL, **kwargs) -> ConnectionPair:
    pair = ConnectionPair(server_config=server_config, **kwargs)
    pair.handshake()
    pair.take(pair.client)
    pair.take(pair.server)
    return pair


def test_nothing_is_acked_until_released() -> None:
    pair = open_pair()
    for i in range(3):
        pair.client.send(status(i), pair.now)
    pair.pump()
    assert [e.seq for e in pair.take(pair.server)] == [1, 2, 3]
    pair.run_until(pair.now + 30.0)  # far beyond ack_delay: still no ack
    assert [e for e in pair.take(pair.client) if isinstance(e, Acked)] == []
    assert len(pair.client.unacked()) == 3
    assert pair.server.acked_up_to == 0 and pair.server.received_up_to == 3


def test_release_acks_cumulatively_within_ack_delay() -> None:
    pair = open_pair()
    for i in range(3):
        pair.client.send(status(i), pair.now)
    pair.pump()
    pair.server.release(2, pair.now)
    assert pair.server.acked_up_to == 2
    assert pair.server.get_timer() == pytest.approx(pair.now + 0.5)
    pair.run_until(pair.now + 0.5)
    assert [e for e in pair.take(pair.client) if isinstance(e, Acked)] == [Acked(2)]
    assert [s for s, _ in pair.client.unacked()] == [3]
    pair.server.release(2, pair.now)  # again: nothing new, no ack owed
    assert pair.server.data_to_send() == b""


def test_release_of_ack_every_messages_acks_at_once() -> None:
    pair = open_pair(SessionConfig(manual_ack=True, ack_delay=10.0, ack_every=4))
    for i in range(5):
        pair.client.send(status(i), pair.now)
    pair.pump()
    assert pair.take(pair.client) == []  # five delivered, none released: no ack
    pair.server.release(4, pair.now)
    pair.pump()
    assert pair.take(pair.client) == [Acked(4)]


def test_duplicates_are_acked_only_once_released() -> None:
    pair = open_pair(SessionConfig(manual_ack=True, ack_every=1, ack_delay=1.0))
    server = pair.server
    server.receive_data(encode(status(1), 1) + encode(status(2), 2), pair.now)
    assert [e.seq for e in server.events_received()] == [1, 2]
    server.release(1, pair.now)
    assert [m.up_to for m in frames(server.data_to_send())] == [1]
    # 1 is released: its duplicate is acked again; 2 is not: its duplicate waits
    server.receive_data(encode(status(1), 1), pair.now)
    assert [m.up_to for m in frames(server.data_to_send())] == [1]
    server.receive_data(encode(status(2), 2), pair.now)
    assert server.events_received() == [] and server.data_to_send() == b""
    server.release(2, pair.now)
    assert [m.up_to for m in frames(server.data_to_send())] == [2]


def test_unreleased_messages_are_resent_after_a_reconnect() -> None:
    first = open_pair()
    for i in range(4):
        first.client.send(status(i), first.now)
    first.pump()
    first.server.release(2, first.now)
    first.run_until(first.now + 1.0)
    pending = first.client.unacked()
    assert [s for s, _ in pending] == [3, 4]
    second = ConnectionPair(server_config=MANUAL, next_seq=first.client.next_seq)
    second.handshake(received_up_to=2, pending=pending)
    resent = [e for e in second.take(second.server) if isinstance(e, MessageReceived)]
    assert [(e.seq, e.message) for e in resent] == pending
    assert second.server.acked_up_to == 2


def test_close_acks_only_what_was_released() -> None:
    pair = open_pair()
    for i in range(3):
        pair.client.send(status(i), pair.now)
    pair.pump()
    pair.server.release(1, pair.now)
    pair.server.close(CloseCode.GOING_AWAY, "bye", pair.now)
    ack, close = frames(pair.server.data_to_send())
    assert ack == Ack(1) and isinstance(close, Close)
    pair.server.release(3, pair.now)  # closing: nothing more is sent
    assert pair.server.data_to_send() == b""


def unknown_kind(seq: int) -> bytes:
    payload = msgpack.packb({"k": "from_the_future", "s": seq, "b": {}})
    return len(payload).to_bytes(4, "big") + payload


def test_unknown_kinds_are_covered_by_the_next_release() -> None:
    pair = open_pair(SessionConfig(manual_ack=True, ack_every=1, ack_delay=1.0))
    server = pair.server
    server.receive_data(encode(status(1), 1), pair.now)
    server.receive_data(unknown_kind(2), pair.now)
    [error] = frames(server.data_to_send())  # the error reply, but no ack: 1 is in progress
    assert error.kind == "error" and error.in_reply_to == 2
    assert server.received_up_to == 2
    server.release(server.received_up_to, pair.now)
    assert [m.up_to for m in frames(server.data_to_send())] == [2]


def test_an_unknown_kind_after_everything_released_is_acked_at_once() -> None:
    pair = open_pair(SessionConfig(manual_ack=True, ack_every=1, ack_delay=1.0))
    server = pair.server
    server.receive_data(encode(status(1), 1), pair.now)
    server.release(1, pair.now)
    assert [m.up_to for m in frames(server.data_to_send())] == [1]
    server.receive_data(unknown_kind(2), pair.now)
    error, ack = frames(server.data_to_send())
    assert error.in_reply_to == 2 and ack == Ack(2)
    assert server.acked_up_to == 2


def test_release_misuse_is_a_usage_error() -> None:
    pair = open_pair()
    pair.client.send(status(1), pair.now)
    pair.pump()
    with pytest.raises(UsageError, match="beyond received_up_to=1"):
        pair.server.release(2, pair.now)
    with pytest.raises(UsageError, match="takes a seq"):
        pair.server.release(True, pair.now)  # type: ignore[arg-type]
    auto = ConnectionPair()
    auto.handshake()
    with pytest.raises(UsageError, match="manual_ack"):
        auto.server.release(0, auto.now)
    with pytest.raises(SettingsError, match="manual_ack"):
        SessionConfig(manual_ack="yes")  # type: ignore[arg-type]


def test_the_welcome_sets_the_release_point() -> None:
    pair = ConnectionPair(server_config=MANUAL, next_seq=10)
    pair.handshake(received_up_to=7)
    assert pair.server.acked_up_to == 7
