"""Session: two sessions pumped in memory through every rule of docs/protocol.md."""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest

from protocol import (
    TRANSITIONS,
    Ack,
    Acked,
    Close,
    CloseCode,
    Closed,
    Error,
    ErrorCode,
    Established,
    HelloReceived,
    InvalidMessage,
    MessageReceived,
    MessageTooLarge,
    MetricsBatch,
    ObjectUpsert,
    PeerDead,
    PeerError,
    Ping,
    Pong,
    Refused,
    Role,
    Session,
    SessionConfig,
    SessionState,
    SettingsError,
    StateError,
    UsageError,
    Welcome,
    WindowFull,
    decode_payload,
    encode,
)
from protocol.codec import FrameDecoder
from tests.protocol.helpers import POD, ConnectionPair, hello, status


def frames(data: bytes) -> list:
    """Decode bytes a session sent into messages."""
    decoder = FrameDecoder()
    decoder.feed(data)
    return [m for _, m in decoder]


def raw(envelope: object) -> bytes:
    payload = msgpack.packb(envelope)
    return len(payload).to_bytes(4, "big") + payload


def open_pair(**kwargs) -> ConnectionPair:
    pair = ConnectionPair(**kwargs)
    pair.handshake()
    pair.take(pair.client)
    pair.take(pair.server)
    return pair


def closed_events(events) -> list[Closed]:
    return [e for e in events if isinstance(e, Closed)]


# --- handshake ------------------------------------------------------------------------------


def test_handshake_opens_both_sides() -> None:
    pair = ConnectionPair()
    pair.client.connect(hello(capabilities=("twins",)), pair.now)
    assert pair.client.state is SessionState.HELLO_SENT
    pair.pump()
    [received] = pair.take(pair.server)
    assert isinstance(received, HelloReceived)
    assert received.hello.node_name == "edge-1" and received.version == 1
    assert pair.server.state is SessionState.HELLO_RECEIVED
    welcome = Welcome(1, 1_700_000_000.0, "s-9", 0, 15.0)
    pair.server.accept(welcome, pair.now)
    pair.pump()
    # The session fills in the limits both sides agreed on (the defaults on both here).
    agreed = replace(welcome, max_frame_size=4 * 1024 * 1024, max_message_size=8 * 1024 * 1024)
    assert pair.take(pair.client) == [Established(agreed)]
    assert pair.client.state is pair.server.state is SessionState.OPEN
    assert pair.client.version == pair.server.version == 1


def test_server_picks_the_highest_common_version() -> None:
    pair = ConnectionPair(server_config=SessionConfig(min_version=1, max_version=3))
    pair.client.connect(hello(2, 5), pair.now)
    pair.pump()
    [received] = pair.take(pair.server)
    assert received.version == 3


@pytest.mark.parametrize(("low", "high"), [(2, 3), (7, 9)])
def test_no_common_version_closes_both_sides_naming_both_ranges(low: int, high: int) -> None:
    pair = ConnectionPair()
    pair.client.connect(hello(low, high), pair.now)
    pair.pump()
    for side in (pair.client, pair.server):
        [closed] = pair.take(side)
        assert isinstance(closed, Closed)
        assert closed.code is CloseCode.VERSION_MISMATCH
        assert f"{low}..{high}" in closed.reason and "1..1" in closed.reason
        assert side.state is SessionState.CLOSED
    assert not any(isinstance(e, HelloReceived) for e in pair.server_events)


def test_a_welcome_with_an_unoffered_version_closes_the_client() -> None:
    client = Session(Role.CLIENT, now=0.0)
    client.connect(hello(1, 1), 0.0)
    client.data_to_send()
    client.receive_data(encode(Welcome(4, 0.0, "s", 0, 20.0)), 0.1)
    [closed] = client.events_received()
    assert closed.code is CloseCode.VERSION_MISMATCH and "4..4" in closed.reason
    [close] = frames(client.data_to_send())
    assert isinstance(close, Close) and close.code is CloseCode.VERSION_MISMATCH


def test_reject_sends_the_reason_and_retry_after() -> None:
    pair = ConnectionPair()
    pair.client.connect(hello(), pair.now)
    pair.pump()
    pair.take(pair.server)
    pair.server.reject(CloseCode.OVERLOADED, "too many nodes", pair.now, retry_after=30.0)
    pair.pump()
    [client_closed] = pair.take(pair.client)
    assert client_closed == Closed(CloseCode.OVERLOADED, "too many nodes", True, 30.0)
    [server_closed] = pair.take(pair.server)
    assert server_closed.by_peer is False and server_closed.code is CloseCode.OVERLOADED


def test_accept_checks_the_welcome() -> None:
    pair = ConnectionPair()
    pair.client.connect(hello(), pair.now)
    pair.pump()
    with pytest.raises(UsageError, match="negotiated"):
        pair.server.accept(Welcome(2, 0.0, "s", 0, 20.0), pair.now)
    with pytest.raises(UsageError, match="liveness_timeout"):
        pair.server.accept(Welcome(1, 0.0, "s", 0, 60.0), pair.now)
    assert pair.server.state is SessionState.HELLO_RECEIVED


# --- state errors ---------------------------------------------------------------------------


def test_illegal_calls_raise_state_error_naming_state_and_event() -> None:
    client = Session(Role.CLIENT, now=0.0)
    server = Session(Role.SERVER, now=0.0)
    with pytest.raises(StateError) as info:
        client.send(status(), 0.0)
    assert info.value.state is SessionState.IDLE and info.value.event == "send"
    assert "send" in str(info.value) and "IDLE" in str(info.value)
    with pytest.raises(StateError) as info:
        server.connect(hello(), 0.0)
    assert info.value.role is Role.SERVER
    with pytest.raises(StateError):
        client.accept(Welcome(1, 0.0, "s", 0, 20.0), 0.0)
    client.connect(hello(), 0.0)
    with pytest.raises(StateError):
        client.connect(hello(), 0.0)


def test_send_refuses_session_managed_and_wrong_direction_kinds() -> None:
    pair = open_pair()
    with pytest.raises(UsageError, match="the session"):
        pair.client.send(Ping(nonce=1), pair.now)
    with pytest.raises(UsageError, match="hub"):
        pair.client.send(ObjectUpsert(POD, "1", {}), pair.now)
    with pytest.raises(UsageError, match="edge"):
        pair.server.send(status(), pair.now)
    with pytest.raises(UsageError):
        pair.client.send({"k": "pod_status"}, pair.now)  # type: ignore[arg-type]


def test_the_table_has_one_entry_per_legal_move_and_closed_is_final() -> None:
    assert TRANSITIONS[(Role.CLIENT, SessionState.IDLE, "connect")] is SessionState.HELLO_SENT
    assert (Role.SERVER, SessionState.IDLE, "connect") not in TRANSITIONS
    out_of_closed = {
        to for (_, state, _), to in TRANSITIONS.items() if state is SessionState.CLOSED
    }
    assert out_of_closed == {SessionState.CLOSED}


# --- acks and the window -------------------------------------------------------------------


def test_acks_are_cumulative_and_delayed_at_most_ack_delay() -> None:
    pair = open_pair(server_config=SessionConfig(ack_delay=0.5, ack_every=100))
    seqs = [pair.client.send(status(i), pair.now) for i in range(3)]
    assert seqs == [1, 2, 3]
    pair.pump()
    assert [e.seq for e in pair.take(pair.server)] == [1, 2, 3]
    assert len(pair.client.unacked()) == 3
    assert pair.server.get_timer() == pytest.approx(pair.now + 0.5)
    pair.run_until(pair.now + 0.49)
    assert pair.take(pair.client) == []
    pair.run_until(pair.now + 0.02)
    assert pair.take(pair.client) == [Acked(3)]
    assert pair.client.unacked() == []


def test_ack_every_n_messages_without_waiting() -> None:
    pair = open_pair(server_config=SessionConfig(ack_delay=10.0, ack_every=4))
    for i in range(4):
        pair.client.send(status(i), pair.now)
    pair.pump()
    assert pair.take(pair.client) == [Acked(4)]


def test_full_window_raises_window_full_until_an_ack_frees_it() -> None:
    pair = open_pair(
        client_config=SessionConfig(window=4),
        server_config=SessionConfig(ack_every=1000, ack_delay=1.0),
    )
    for i in range(4):
        pair.client.send(status(i), pair.now)
    assert pair.client.window_free == 0
    with pytest.raises(WindowFull) as info:
        pair.client.send(status(9), pair.now)
    assert info.value.window == 4
    assert pair.client.next_seq == 5  # the refused message used no seq
    pair.pump()
    pair.run_until(pair.now + 1.0)  # the delayed ack arrives
    assert pair.take(pair.client) == [Acked(4)]
    assert pair.client.window_free == 4
    assert pair.client.send(status(9), pair.now) == 5


def test_messages_without_ack_take_no_seq_and_no_window() -> None:
    pair = open_pair(client_config=SessionConfig(window=1))
    for i in range(5):
        assert pair.server.send(ObjectUpsert(POD, str(i), {}), pair.now) is None
    pair.pump()
    events = pair.take(pair.client)
    assert [e.seq for e in events] == [None] * 5
    assert [e.message.resource_version for e in events] == ["0", "1", "2", "3", "4"]


def test_an_ack_beyond_what_was_sent_is_a_protocol_error() -> None:
    pair = open_pair()
    pair.client.send(status(), pair.now)
    pair.client.receive_data(encode(Ack(up_to=5)), pair.now)
    [closed] = pair.client.events_received()
    assert closed.code is CloseCode.PROTOCOL_ERROR and "up_to=5" in closed.reason


# --- resend after reconnect and de-duplication ----------------------------------------------


def test_resend_after_reconnect_minus_what_the_hub_processed() -> None:
    first = open_pair(server_config=SessionConfig(ack_every=1000, ack_delay=100.0))
    for i in range(5):
        first.client.send(status(i), first.now)
    first.pump()
    delivered = [e.seq for e in first.take(first.server)]
    assert delivered == [1, 2, 3, 4, 5]
    hub_processed = 3  # the hub persisted seqs up to 3 before the link died
    pending = first.client.unacked()
    assert [s for s, _ in pending] == [1, 2, 3, 4, 5]  # nothing was acked: all pending

    second = ConnectionPair(next_seq=first.client.next_seq, now=first.now + 10)
    second.handshake(received_up_to=hub_processed, pending=pending)
    client_events = second.take(second.client)
    assert isinstance(client_events[0], Established)
    assert client_events[1] == Acked(3)  # dropped from the outbox without a resend
    resent = second.take(second.server)[1:]  # after HelloReceived
    assert [(e.seq, e.message) for e in resent] == pending[3:]
    assert second.client.send(status(6), second.now) == 6


def test_the_receiver_drops_duplicates_but_still_acks_them() -> None:
    pair = open_pair(server_config=SessionConfig(ack_every=1, ack_delay=1.0))
    for seq in (1, 2, 2, 1, 3):
        pair.server.receive_data(encode(status(seq), seq), pair.now)
    delivered = [e.seq for e in pair.server.events_received() if isinstance(e, MessageReceived)]
    assert delivered == [1, 2, 3]
    acks = [m.up_to for m in frames(pair.server.data_to_send()) if isinstance(m, Ack)]
    assert acks == [1, 2, 2, 2, 3]


def test_the_server_starts_de_duplication_at_received_up_to() -> None:
    pair = ConnectionPair(next_seq=8)
    pair.handshake(received_up_to=5, pending=[(4, status(4)), (6, status(6))])
    received = [e for e in pair.take(pair.server) if isinstance(e, MessageReceived)]
    assert [e.seq for e in received] == [6]
    assert pair.server.received_up_to == 6


def test_the_client_never_reuses_a_seq_the_hub_has_seen() -> None:
    pair = ConnectionPair(next_seq=1)  # e.g. the edge's store was wiped
    pair.handshake(received_up_to=500)
    assert pair.client.next_seq == 501
    assert pair.client.send(status(), pair.now) == 501
    pair.pump()
    assert [e.seq for e in pair.take(pair.server) if isinstance(e, MessageReceived)] == [501]


def test_pending_must_be_increasing_acked_kinds_below_next_seq() -> None:
    client = Session(Role.CLIENT, now=0.0, next_seq=5)
    with pytest.raises(UsageError):
        client.connect(hello(), 0.0, pending=[(5, status())])
    with pytest.raises(UsageError):
        client.connect(hello(), 0.0, pending=[(3, status()), (2, status())])
    with pytest.raises(UsageError):
        client.connect(hello(), 0.0, pending=[(1, ObjectUpsert(POD, "1", {}))])
    assert client.state is SessionState.IDLE


def test_pending_beyond_the_window_is_all_resent() -> None:
    pair = ConnectionPair(client_config=SessionConfig(window=2), next_seq=5)
    pending = [(s, status(s)) for s in (1, 2, 3, 4)]
    pair.handshake(pending=pending)
    assert [e.seq for e in pair.take(pair.server) if isinstance(e, MessageReceived)] == [1, 2, 3, 4]
    with pytest.raises(WindowFull):  # until acks bring it back under the window
        pair.client.send(status(), pair.now)


def test_unacked_includes_pending_not_yet_resent() -> None:
    client = Session(Role.CLIENT, now=0.0, next_seq=3)
    client.connect(hello(), 0.0, pending=[(1, status(1)), (2, status(2))])
    assert [s for s, _ in client.unacked()] == [1, 2]  # the session died before the welcome


# --- liveness --------------------------------------------------------------------------------


def test_idle_client_pings_and_stays_alive() -> None:
    pair = open_pair()
    start = pair.now
    pair.run_until(start + 300)
    assert pair.client.state is pair.server.state is SessionState.OPEN
    assert pair.take(pair.client) == [] and pair.take(pair.server) == []


def test_the_welcome_heartbeat_sets_the_ping_interval() -> None:
    pair = ConnectionPair()
    pair.handshake(heartbeat_interval=7.0)
    wait = 7.0 * 1.05  # the interval plus the documented 5% slack
    assert pair.client.get_timer() == pytest.approx(pair.now + wait)
    pair.run_until(pair.now + wait)
    assert pair.client.get_timer() == pytest.approx(pair.now + wait)  # pinged, pong back


def test_a_silent_peer_is_declared_dead_within_the_liveness_timeout() -> None:
    pair = open_pair()
    start = pair.now
    pair.wire = False  # packets dropped, no FIN
    pair.run_until(start + 59.9)
    assert pair.client.state is SessionState.OPEN
    pair.run_until(start + 60.0)
    for side in (pair.client, pair.server):
        dead, closed = pair.take(side)
        assert isinstance(dead, PeerDead) and dead.silent_for == pytest.approx(60.0)
        assert closed.code is CloseCode.PEER_DEAD and closed.by_peer
        assert side.state is SessionState.CLOSED and side.get_timer() is None


def test_a_client_streaming_messages_still_pings_a_silent_hub() -> None:
    pair = open_pair()
    start = pair.now
    pair.wire = False
    pinged = False
    while pair.now < start + 59:
        pair.now += 1
        pair.client.send(MetricsBatch("edge-1", {}), pair.now)  # always sending
        pair.client.handle_timer(pair.now)
        out = frames(pair.client.data_to_send())
        pinged = pinged or any(isinstance(m, Ping) for m in out)
    assert pinged
    pair.client.handle_timer(start + 60)
    assert isinstance(pair.client.events_received()[0], PeerDead)


def test_the_server_answers_pings_and_never_sends_them() -> None:
    pair = open_pair()
    pair.client.receive_data(b"", pair.now)  # no bytes: nothing happens
    pair.run_until(pair.now + 25)
    server = Session(Role.SERVER, now=0.0)
    assert server.get_timer() == 60.0  # only the liveness deadline while waiting for hello
    pair.server.receive_data(encode(Ping(nonce=77)), pair.now)
    assert frames(pair.server.data_to_send()) == [Pong(nonce=77)]
    assert pair.server.pings_sent == 0


def test_pings_sent_counts_the_clients_pings() -> None:
    pair = ConnectionPair()
    pair.handshake(heartbeat_interval=7.0)
    assert pair.client.pings_sent == 0
    pair.run_until(pair.now + 7.0 * 1.05)
    assert pair.client.pings_sent == 1
    pair.run_until(pair.now + 7.0 * 1.05)
    assert pair.client.pings_sent == 2


def test_a_session_that_never_says_hello_expires() -> None:
    server = Session(Role.SERVER, now=0.0)
    server.handle_timer(60.0)
    dead, closed = server.events_received()
    assert isinstance(dead, PeerDead) and closed.code is CloseCode.PEER_DEAD


# --- close -------------------------------------------------------------------------------------


def test_orderly_close_both_ways() -> None:
    pair = open_pair()
    pair.client.close(CloseCode.GOING_AWAY, "reboot", pair.now, retry_after=5.0)
    assert pair.client.state is SessionState.CLOSING
    pair.pump()
    assert pair.take(pair.server) == [Closed(CloseCode.GOING_AWAY, "reboot", True, 5.0)]
    assert pair.take(pair.client) == [Closed(CloseCode.GOING_AWAY, "reboot", False, 5.0)]
    assert pair.client.state is pair.server.state is SessionState.CLOSED
    pair.client.close(CloseCode.NORMAL, "again", pair.now)  # idempotent
    assert pair.client.events_received() == [] and pair.client.data_to_send() == b""


def test_close_acks_what_was_received_first() -> None:
    pair = open_pair(server_config=SessionConfig(ack_every=100, ack_delay=10.0))
    pair.client.send(status(), pair.now)
    pair.pump()
    pair.server.close(CloseCode.NORMAL, "", pair.now)
    ack, close = frames(pair.server.data_to_send())
    assert ack == Ack(1) and isinstance(close, Close)


def test_close_gives_up_after_close_timeout() -> None:
    pair = open_pair(client_config=SessionConfig(close_timeout=2.0))
    pair.wire = False
    start = pair.now
    pair.client.close(CloseCode.NORMAL, "bye", start)
    pair.run_until(start + 1.99)
    assert pair.client.state is SessionState.CLOSING
    pair.run_until(start + 2.0)
    [closed] = pair.take(pair.client)
    assert closed.code is CloseCode.NORMAL and not closed.by_peer and "2.0 s" in closed.reason


def test_a_ping_in_flight_never_delays_the_close() -> None:
    pair = open_pair(client_config=SessionConfig(close_timeout=3.0))
    start = pair.now
    pair.wire = False  # the link dies just as...
    pair.client.handle_timer(start + 21.0)  # ...the client's ping goes out, unanswered
    assert frames(pair.client.data_to_send()) == [Ping(nonce=1)]
    assert pair.client.state is SessionState.OPEN
    pair.client.close(CloseCode.NORMAL, "bye", start + 21.0)
    assert pair.client.get_timer() == pytest.approx(start + 24.0)
    pair.run_until(start + 24.0)
    [closed] = pair.take(pair.client)
    assert closed.code is CloseCode.NORMAL
    assert pair.client.state is SessionState.CLOSED
    # and a late pong is ignored, not answered
    pair.client.receive_data(encode(Pong(nonce=1)), pair.now)
    assert pair.client.events_received() == [] and pair.client.data_to_send() == b""


def test_while_closing_messages_are_delivered_but_nothing_is_sent() -> None:
    pair = open_pair()
    pair.server.close(CloseCode.NORMAL, "", pair.now)
    pair.server.data_to_send()
    pair.server.receive_data(encode(status(), 1) + encode(Ping(nonce=3)), pair.now)
    [received] = pair.server.events_received()
    assert isinstance(received, MessageReceived)
    assert pair.server.data_to_send() == b""


def test_simultaneous_close() -> None:
    pair = open_pair()
    pair.client.close(CloseCode.NORMAL, "a", pair.now)
    pair.server.close(CloseCode.NORMAL, "b", pair.now)
    pair.pump()
    assert [e.reason for e in pair.take(pair.client)] == ["a"]
    assert [e.reason for e in pair.take(pair.server)] == ["b"]
    assert pair.client.state is pair.server.state is SessionState.CLOSED


def test_close_from_idle_ends_at_once() -> None:
    client = Session(Role.CLIENT, now=0.0)
    client.close(CloseCode.NORMAL, "never mind", 0.0)
    assert client.events_received() == [Closed(CloseCode.NORMAL, "never mind", False)]
    assert client.data_to_send() == b"" and client.get_timer() is None


def test_eof_ends_the_session_as_connection_lost() -> None:
    pair = open_pair()
    pair.client.receive_data(encode(ObjectUpsert(POD, "1", {}))[:10], pair.now)
    pair.client.receive_eof(pair.now)
    [closed] = pair.client.events_received()
    assert closed.code is CloseCode.CONNECTION_LOST and closed.by_peer
    assert "truncated frame" in closed.reason
    pair.server.receive_eof(pair.now)
    [closed] = pair.server.events_received()
    assert closed.code is CloseCode.CONNECTION_LOST and "truncated" not in closed.reason


def test_eof_while_closing_finishes_our_close() -> None:
    pair = open_pair()
    pair.client.close(CloseCode.GOING_AWAY, "bye", pair.now)
    pair.client.receive_eof(pair.now)
    assert pair.client.events_received() == [Closed(CloseCode.GOING_AWAY, "bye", False)]


# --- errors from the peer --------------------------------------------------------------------


def test_unknown_kind_gets_an_error_reply_and_the_session_survives() -> None:
    pair = open_pair(server_config=SessionConfig(ack_every=1))
    pair.server.receive_data(raw({"k": "teleport", "s": 1, "b": {}}) + encode(status(), 2), 1.0)
    refused, received = pair.server.events_received()
    assert received.seq == 2
    replies = frames(pair.server.data_to_send())
    assert replies[0] == Error(
        ErrorCode.UNKNOWN_KIND, "invalid k: unknown message kind 'teleport'", 1
    )
    assert refused == Refused(replies[0])  # the application hears of it too (metrics)
    assert replies[-1] == Ack(2)
    assert pair.server.state is SessionState.OPEN
    pair.client.receive_data(encode(replies[0]), 1.0)
    [peer_error] = pair.client.events_received()
    assert isinstance(peer_error, PeerError) and peer_error.error.in_reply_to == 1


def test_an_invalid_field_closes_with_protocol_error_after_acking_the_good_ones() -> None:
    pair = open_pair(server_config=SessionConfig(ack_every=100))
    bad = raw({"k": "pod_status", "s": 2, "b": {"ref": {"kind": "Pod"}, "status": {}}})
    pair.server.receive_data(encode(status(), 1) + bad + encode(status(), 3), pair.now)
    received, closed = pair.server.events_received()
    assert received.seq == 1
    assert closed.code is CloseCode.PROTOCOL_ERROR and "b.ref.name" in closed.reason
    ack, close = frames(pair.server.data_to_send())
    assert ack == Ack(1) and close.code is CloseCode.PROTOCOL_ERROR
    pair.server.receive_data(encode(status(), 4), pair.now)  # after CLOSED: ignored
    assert pair.server.events_received() == []


def test_a_frame_over_the_limit_closes_with_frame_too_large() -> None:
    pair = open_pair(server_config=SessionConfig(max_frame_size=1024))
    pair.server.receive_data((10**6).to_bytes(4, "big") + b"x" * 100, pair.now)
    [closed] = pair.server.events_received()
    assert closed.code is CloseCode.FRAME_TOO_LARGE and "1000000" in closed.reason
    pair.client.receive_data(pair.server.data_to_send(), pair.now)
    [closed] = pair.client.events_received()
    assert closed.code is CloseCode.FRAME_TOO_LARGE and closed.by_peer


def test_frames_before_an_oversized_one_in_the_same_read_are_delivered_and_acked() -> None:
    pair = open_pair(server_config=SessionConfig(max_frame_size=1024))
    data = encode(status(1), 1) + encode(status(2), 2) + (10**6).to_bytes(4, "big")
    pair.server.receive_data(data, pair.now)
    first, second, closed = pair.server.events_received()
    assert (first.seq, second.seq) == (1, 2)
    assert closed.code is CloseCode.FRAME_TOO_LARGE
    ack, close = frames(pair.server.data_to_send())
    assert ack == Ack(2) and close.code is CloseCode.FRAME_TOO_LARGE


def test_send_refuses_a_message_over_the_limit_without_using_a_seq() -> None:
    pair = open_pair(client_config=SessionConfig(max_frame_size=1024, max_message_size=1500))
    with pytest.raises(MessageTooLarge) as caught:
        pair.client.send(MetricsBatch("e", {"x": ["y" * 2000]}), pair.now)
    assert caught.value.limit == 1500 and caught.value.size > 2000
    assert pair.client.next_seq == 1 and pair.client.unacked() == []


@pytest.mark.parametrize(
    ("role", "payload", "words"),
    [
        (Role.SERVER, encode(status(), 1), "unexpected pod_status in state IDLE"),
        (Role.SERVER, encode(Welcome(1, 0.0, "s", 0, 20.0)), "edge may not send welcome"),
        (Role.CLIENT, encode(ObjectUpsert(POD, "1", {})), "unexpected object_upsert"),
        (Role.SERVER, encode(ObjectUpsert(POD, "1", {})), "edge may not send object_upsert"),
    ],
)
def test_a_message_the_state_or_direction_does_not_allow_is_a_protocol_error(
    role: Role, payload: bytes, words: str
) -> None:
    session = Session(role, now=0.0)
    if role is Role.CLIENT:
        session.connect(hello(), 0.0)
        session.data_to_send()
    session.receive_data(payload, 0.0)
    [closed] = session.events_received()
    assert closed.code is CloseCode.PROTOCOL_ERROR and words in closed.reason
    [close] = frames(session.data_to_send())
    assert close.code is CloseCode.PROTOCOL_ERROR


def test_a_second_hello_is_a_protocol_error() -> None:
    pair = open_pair()
    pair.server.receive_data(encode(hello()), pair.now)
    [closed] = pair.server.events_received()
    assert "unexpected hello in state OPEN" in closed.reason


# --- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"window": 0}, "window"),
        ({"ack_every": 1.5}, "ack_every"),
        ({"ping_interval": -1}, "ping_interval"),
        ({"ack_delay": float("inf")}, "ack_delay"),
        ({"liveness_timeout": 10.0}, "liveness_timeout"),
        ({"max_frame_size": 2**32}, "max_frame_size"),
        ({"min_version": 2, "max_version": 1}, "max_version"),
        ({"close_timeout": True}, "close_timeout"),
    ],
)
def test_session_config_validates_and_names_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(SettingsError) as info:
        SessionConfig(**kwargs)
    assert info.value.key == key


def test_session_config_defaults_are_the_documented_ones() -> None:
    config = SessionConfig()
    assert (config.window, config.ping_interval, config.liveness_timeout) == (256, 20.0, 60.0)
    assert config.max_frame_size == 4 * 1024 * 1024


def test_decode_of_what_a_session_sends_is_plain_codec() -> None:
    client = Session(Role.CLIENT, now=0.0)
    client.connect(hello(), 0.0)
    data = client.data_to_send()
    # with the session's limits filled in (docs/protocol.md, "Lanes and chunks")
    announced = replace(hello(), max_frame_size=4 * 1024 * 1024, max_message_size=8 * 1024 * 1024)
    assert decode_payload(data[4:]) == (None, announced)


def test_a_pending_message_that_does_not_encode_fails_at_connect() -> None:
    bad = MetricsBatch("edge-1", {"x": [object()]})
    client = Session(Role.CLIENT, now=0.0, next_seq=3)
    with pytest.raises(InvalidMessage) as info:
        client.connect(hello(), 0.0, pending=[(1, status()), (2, bad)])
    assert info.value.field == "b.samples"
    assert client.state is SessionState.IDLE and client.data_to_send() == b""


@pytest.mark.parametrize("next_seq", [0, True, 2**64, 1.0])
def test_next_seq_must_be_a_seq(next_seq) -> None:
    with pytest.raises(UsageError):
        Session(Role.CLIENT, now=0.0, next_seq=next_seq)


@pytest.mark.parametrize(
    ("code", "reason", "field"),
    [(99, "", "code"), (CloseCode.PEER_DEAD, "", "code"), (CloseCode.NORMAL, None, "reason")],
)
def test_close_refuses_invalid_and_local_codes_before_changing_state(code, reason, field) -> None:
    pair = open_pair()
    with pytest.raises(InvalidMessage) as info:
        pair.client.close(code, reason, pair.now)
    assert info.value.field == field
    assert pair.client.state is SessionState.OPEN and pair.client.data_to_send() == b""
