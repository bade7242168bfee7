"""Codec: frames, incremental decoding, and every kind of bad input."""

from __future__ import annotations

import tracemalloc

import msgpack
import pytest

from protocol import (
    DecodeError,
    FrameDecoder,
    FrameTooLarge,
    InvalidMessage,
    MetricsBatch,
    ObjectUpsert,
    Ping,
    PodStatus,
    RemoteProtocolError,
    UnknownKind,
    decode_payload,
    encode,
)
from tests.protocol.helpers import POD, sample_messages, status


def frame(envelope: object) -> bytes:
    payload = msgpack.packb(envelope)
    return len(payload).to_bytes(4, "big") + payload


def body_of(message) -> dict:
    return msgpack.unpackb(encode(message, 1 if message.needs_ack else None)[4:])["b"]


def test_stream_split_at_every_byte_gives_the_same_frames() -> None:
    messages = sample_messages()
    stream = b"".join(encode(m, i + 1 if m.needs_ack else None) for i, m in enumerate(messages))
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got += list(decoder)
    assert [m for _, m in got] == messages
    assert decoder.buffered == 0
    decoder.check_eof()  # ended on a frame boundary: fine


def test_many_frames_in_one_chunk() -> None:
    frames = [encode(status(i), i + 1) for i in range(50)]
    decoder = FrameDecoder()
    decoder.feed(b"".join(frames))
    assert [seq for seq, _ in decoder] == list(range(1, 51))


def test_unknown_fields_are_ignored() -> None:
    body = body_of(status(3))
    body["future_field"] = {"x": [1, 2]}
    body["ref"]["cluster"] = "east"
    seq, message = decode_payload(
        msgpack.packb({"k": "pod_status", "s": 4, "b": body, "trace": "abc"})
    )
    assert (seq, message) == (4, status(3))


def test_length_prefix_over_the_limit_fails_before_the_payload_arrives() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.feed((1025).to_bytes(4, "big"))  # only the prefix: nothing else was buffered
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert (info.value.size, info.value.limit) == (1025, 1024)
    assert decoder.buffered == 0
    with pytest.raises(FrameTooLarge):  # final: the stream cannot be re-synchronised
        decoder.feed(b"\x00" * 10)
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_feed_frames_takes_every_complete_payload_of_a_read() -> None:
    messages = [status(i) for i in range(5)]
    stream = b"".join(encode(m, i + 1) for i, m in enumerate(messages))
    decoder = FrameDecoder()
    # whole frames plus the start of the next, then the rest of it
    cut = len(stream) - 7
    payloads, too_large = decoder.feed_frames(stream[:cut])
    assert too_large is None and len(payloads) == 4
    assert all(isinstance(p, memoryview) for p in payloads)  # views of the read, no copy
    assert [decode_payload(p) for p in payloads] == [(i + 1, m) for i, m in enumerate(messages[:4])]
    assert decoder.buffered == len(stream[:cut]) - sum(len(p) + 4 for p in payloads)
    payloads, too_large = decoder.feed_frames(stream[cut:])
    assert too_large is None and [decode_payload(p) for p in payloads] == [(5, messages[4])]
    assert decoder.buffered == 0
    assert decoder.feed_frames(b"") == ([], None)


def test_feed_frames_split_at_every_byte_gives_the_same_frames() -> None:
    messages = sample_messages()
    stream = b"".join(encode(m, i + 1 if m.needs_ack else None) for i, m in enumerate(messages))
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        payloads, too_large = decoder.feed_frames(stream[i : i + 1])
        assert too_large is None
        got += [decode_payload(p)[1] for p in payloads]
    assert got == messages
    decoder.check_eof()


def test_feed_frames_reports_an_oversized_prefix_after_the_frames_before_it() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    good = encode(status(1), 1)
    payloads, too_large = decoder.feed_frames(good + (4096).to_bytes(4, "big") + b"x" * 10)
    assert [decode_payload(p) for p in payloads] == [(1, status(1))]
    assert isinstance(too_large, FrameTooLarge) and (too_large.size, too_large.limit) == (
        4096,
        1024,
    )
    assert decoder.buffered == 0  # nothing of the oversized frame is kept
    payloads, too_large = decoder.feed_frames(good)  # broken for good
    assert payloads == [] and isinstance(too_large, FrameTooLarge)
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_a_frame_of_exactly_the_limit_is_accepted() -> None:
    message = MetricsBatch("edge-1", {"blob": ["x" * 200]})
    data = encode(message, 1)
    decoder = FrameDecoder(max_frame_size=len(data) - 4)
    decoder.feed(data)
    assert decoder.next_frame() == (1, message)


def test_truncated_frames_are_reported_at_end_of_stream() -> None:
    data = encode(status(), 1)
    for cut in (1, 3, 4, 10, len(data) - 1):
        decoder = FrameDecoder()
        decoder.feed(data[:cut])
        assert decoder.next_frame() is None
        with pytest.raises(DecodeError, match="truncated frame") as info:
            decoder.check_eof()
        assert info.value.field == "frame"


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # empty payload
        b"\xc1",  # a byte msgpack never uses
        b"\x92\x01",  # an array cut short
        b"\x81\xa1k",  # a map cut short
        msgpack.packb({"k": "ping", "b": {"nonce": 1}}) + b"\x00",  # trailing bytes
        b"\x91" * 5000,  # nesting deeper than the unpacker's stack
        b"\xd4\x05\x00",  # an extension type
        b"\x81\x01\x02",  # an int map key
        b"\xa2\xff\xfe",  # invalid UTF-8 in a str
    ],
)
def test_garbage_msgpack_is_a_decode_error(payload: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode_payload(payload)
    assert info.value.field == "frame"


@pytest.mark.parametrize(
    ("envelope", "field"),
    [
        ([1, 2], "frame"),
        ("ping", "frame"),
        ({"b": {}}, "k"),
        ({"k": 5, "b": {}}, "k"),
        ({"k": "ping", "b": [1]}, "b"),
        ({"k": "pod_status", "b": {}}, "s"),  # needs a seq
        ({"k": "ping", "s": 3, "b": {"nonce": 1}}, "s"),  # takes none
        ({"k": "pod_status", "s": 0, "b": {}}, "s"),
        ({"k": "pod_status", "s": -1, "b": {}}, "s"),
        ({"k": "pod_status", "s": "1", "b": {}}, "s"),
        ({"k": "pod_status", "s": True, "b": {}}, "s"),
        ({"k": "ping", "b": {}}, "b.nonce"),  # missing field
        ({"k": "ping", "b": {"nonce": "1"}}, "b.nonce"),
        ({"k": "ping", "b": {"nonce": 1.5}}, "b.nonce"),
        ({"k": "ping", "b": {"nonce": -1}}, "b.nonce"),
        ({"k": "pod_status", "s": 1, "b": {"ref": "default/web-0"}}, "b.ref"),
        ({"k": "pod_status", "s": 1, "b": {"ref": {"kind": "Pod", "name": "x"}}}, "b.ref.uid"),
        ({"k": "close", "b": {"code": 999}}, "b.code"),
        ({"k": "close", "b": {"code": "NORMAL"}}, "b.code"),
        ({"k": "hello", "b": {"min_version": 1}}, "b.max_version"),
        ({"k": "error", "b": {"code": 1, "message": None}}, "b.message"),
    ],
)
def test_invalid_envelopes_and_fields_name_the_field(envelope: object, field: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_payload(msgpack.packb(envelope))
    assert info.value.field == field
    assert not isinstance(info.value, UnknownKind)


def test_wrong_field_types_in_every_kind_are_decode_errors() -> None:
    for message in sample_messages():
        for name in body_of(message):
            body = body_of(message)
            # a value of a foreign type: a nested list, or a float where a list was
            body[name] = [["not", "this"]] if not isinstance(body[name], list) else 3.5
            envelope = {"k": message.kind, "b": body}
            if message.needs_ack:
                envelope["s"] = 1
            payload = msgpack.packb(envelope)
            try:
                decode_payload(payload)
            except DecodeError as exc:
                assert exc.field.startswith(f"b.{name}"), (message.kind, name, exc)
            else:  # only fields typed "any value" may take a list
                assert (message.kind, name) == ("twin_reported", "value")


def test_unknown_kind_carries_kind_and_seq_and_consumes_its_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(frame({"k": "teleport", "s": 12, "b": {}}) + encode(Ping(nonce=5)))
    with pytest.raises(UnknownKind) as info:
        decoder.next_frame()
    assert (info.value.kind, info.value.seq) == ("teleport", 12)
    assert isinstance(info.value, RemoteProtocolError)
    assert decoder.next_frame() == (None, Ping(nonce=5))


def test_a_decode_error_consumes_its_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(frame({"k": "ping", "b": {"nonce": "x"}}) + encode(Ping(nonce=6)))
    with pytest.raises(DecodeError):
        decoder.next_frame()
    assert decoder.next_frame() == (None, Ping(nonce=6))


def test_encode_checks_the_seq_against_the_kind() -> None:
    with pytest.raises(InvalidMessage) as info:
        encode(status())
    assert info.value.field == "s"
    with pytest.raises(InvalidMessage):
        encode(Ping(nonce=1), 5)
    with pytest.raises(InvalidMessage):
        encode(status(), 2**64)


def test_encode_names_the_field_msgpack_refuses() -> None:
    bad = ObjectUpsert(ref=POD, resource_version="1", object={"when": object()})
    with pytest.raises(InvalidMessage) as info:
        encode(bad)
    assert info.value.field == "b.object"


def test_encode_refuses_a_frame_over_the_limit() -> None:
    big = PodStatus(POD, {"blob": "x" * 2000}, 1.0)
    with pytest.raises(InvalidMessage) as info:
        encode(big, 1, max_frame_size=1024)
    assert info.value.field == "frame"


def test_decoder_rejects_a_nonsense_limit() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=0)


def test_idle_decoder_gives_its_buffer_back() -> None:
    tracemalloc.start()
    try:
        decoder = FrameDecoder()
        before = tracemalloc.get_traced_memory()[0]
        data = encode(MetricsBatch("e", {"x": ["y" * 100_000]}), 1)
        decoder.feed(data[:50_000])  # a partial frame is buffered...
        decoder.feed(data[50_000:])
        assert decoder.next_frame() is not None
        del data
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 0
    assert after - before < 4096  # ...and the 100 kB are given back once it is decoded
