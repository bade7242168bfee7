"""Property tests: random and near-valid input never escapes the documented errors.

The decoder may only answer with a frame, "need more bytes" or a ``DecodeError`` (of which
``FrameTooLarge`` and ``UnknownKind`` are kinds); a session fed anything never raises,
stays in a legal state, ends with exactly one ``Closed`` event, and only ever sends bytes
that decode as valid frames.
"""

from __future__ import annotations

import itertools

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import (
    REGISTRY,
    Closed,
    DecodeError,
    FrameDecoder,
    MessageReceived,
    SessionConfig,
    SessionState,
    decode_payload,
    encode,
)
from tests.protocol.helpers import ConnectionPair, sample_messages, status

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SAMPLES = sample_messages()

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def envelope_of(message, seq: int | None) -> dict:
    return msgpack.unpackb(encode(message, seq)[4:])


@st.composite
def near_valid_envelopes(draw) -> dict:
    """A valid envelope of a random kind with a few random mutations."""
    message = draw(st.sampled_from(SAMPLES))
    envelope = envelope_of(message, 7 if message.needs_ack else None)
    body = envelope["b"]
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        op = draw(st.sampled_from(["drop", "replace", "add", "kind", "seq", "nested"]))
        keys = sorted(body)
        if op == "drop" and keys:
            body.pop(draw(st.sampled_from(keys)))
        elif op == "replace" and keys:
            body[draw(st.sampled_from(keys))] = draw(values)
        elif op == "add":
            body[draw(st.text(max_size=10))] = draw(values)
        elif op == "kind":
            envelope["k"] = draw(st.sampled_from([*REGISTRY, "nope", ""]) | st.text(max_size=5))
        elif op == "seq":
            envelope["s"] = draw(st.none() | st.integers(min_value=-5, max_value=2**64 - 1))
        elif op == "nested" and isinstance(body.get("ref"), dict):
            body["ref"][draw(st.sampled_from(["kind", "name", "uid", "namespace", "x"]))] = draw(
                values
            )
    return envelope


def pack(envelope: dict) -> bytes:
    payload = msgpack.packb(envelope)
    return len(payload).to_bytes(4, "big") + payload


@SETTINGS
@given(data=st.binary(max_size=300), limit=st.integers(min_value=1, max_value=400))
def test_random_bytes_only_give_frames_or_decode_errors(data: bytes, limit: int) -> None:
    decoder = FrameDecoder(max_frame_size=limit)
    decoder.feed(data)
    try:
        while decoder.next_frame() is not None:
            pass
        decoder.check_eof()
    except DecodeError:
        pass


@SETTINGS
@given(envelope=near_valid_envelopes())
def test_near_valid_messages_decode_or_raise_decode_error(envelope: dict) -> None:
    payload = msgpack.packb(envelope)
    try:
        seq, message = decode_payload(payload)
    except DecodeError:
        return
    # Whatever was accepted is a valid message: it re-encodes and decodes to itself.
    assert decode_payload(encode(message, seq)[4:]) == (seq, message)


@SETTINGS
@given(
    chunks=st.lists(st.binary(max_size=80) | near_valid_envelopes().map(pack), max_size=6),
    side=st.sampled_from(["client", "server"]),
)
def test_a_session_fed_anything_never_raises_and_ends_cleanly(chunks: list, side: str) -> None:
    pair = ConnectionPair(server_config=SessionConfig(max_frame_size=4096, ack_every=2))
    pair.handshake()
    session = pair.client if side == "client" else pair.server
    events = []
    sent = b""
    now = pair.now
    for chunk in chunks:
        now += 1.0
        session.receive_data(chunk, now)
        session.handle_timer(now)
        events += session.events_received()
        sent += session.data_to_send()
    session.receive_eof(now + 1)
    events += session.events_received()
    assert session.state is SessionState.CLOSED
    closed = [e for e in events if isinstance(e, Closed)]
    assert len(closed) == 1 and events[-1] is closed[0]
    delivered = [e.seq for e in events if isinstance(e, MessageReceived) and e.seq is not None]
    assert delivered == sorted(set(delivered))  # each seq at most once, in order
    decoder = FrameDecoder()  # everything the session sent is valid
    decoder.feed(sent)
    list(decoder)
    decoder.check_eof()


@SETTINGS
@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_delivery_does_not_depend_on_how_the_stream_is_cut(cuts: list[int]) -> None:
    pair = ConnectionPair()
    pair.handshake()
    pair.take(pair.server)
    stream = b"".join(encode(status(i), i + 1) for i in range(20))
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for a, b in itertools.pairwise(points):
        pair.server.receive_data(stream[a:b], pair.now)
    delivered = [e for e in pair.server.events_received() if isinstance(e, MessageReceived)]
    assert [(e.seq, e.message) for e in delivered] == [(i + 1, status(i)) for i in range(20)]
