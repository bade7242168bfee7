"""SPDY/3.1 framing and the v4 remote command channels, sans-I/O: a client and a server
connection talk to each other in memory; malformed input of any kind ends in
``SpdyProtocolError`` (with a GOAWAY queued) or is ignored, never another exception."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.spdy.connection import (
    DataReceived,
    GoAwayReceived,
    SpdyConnection,
    SpdyProtocolError,
    StreamOpened,
    StreamReplied,
    StreamReset,
)
from protocol.spdy.dictionary import HEADER_DICTIONARY
from protocol.spdy.remotecommand import (
    Ready,
    RemoteCommandServer,
    Resize,
    Stdin,
    exit_status,
    negotiate,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_dictionary_is_the_spdy3_one() -> None:
    # its length and Adler-32 (the id zlib puts in every stream that uses it); kubectl's
    # header blocks inflate with it (tests/e2e/test_day2.py)
    assert len(HEADER_DICTIONARY) == 1423
    assert zlib.adler32(HEADER_DICTIONARY) == 0xE3C6A7C2


def test_streams_headers_data_reset_and_ping_round_trip() -> None:
    client, server = SpdyConnection(server=False), SpdyConnection(server=True)
    sid = client.open_stream({"streamtype": ["stdout"], "x-multi": ["a", "b"]})
    second = client.open_stream({"streamtype": ["error"]})
    assert (sid, second) == (1, 3)
    events = server.receive_data(client.data_to_send())
    assert events == [
        StreamOpened(1, {"streamtype": ["stdout"], "x-multi": ["a", "b"]}, False),
        StreamOpened(3, {"streamtype": ["error"]}, False),
    ]
    server.reply(1, {"ok": ["1"]})
    server.send_data(1, b"x" * 5000, fin=True)
    client.ping(7)
    server.receive_data(client.data_to_send())  # the ping is echoed
    events = client.receive_data(server.data_to_send())
    assert events == [StreamReplied(1, {"ok": ["1"]}, False), DataReceived(1, b"x" * 5000, True)]
    client.reset(3)
    server.goaway()
    assert server.receive_data(client.data_to_send()) == [StreamReset(3, 5)]
    assert client.receive_data(server.data_to_send()) == [GoAwayReceived(3, 0)]


def test_data_for_an_unknown_stream_is_reset_not_fatal() -> None:
    server = SpdyConnection(server=True)
    frame = (9).to_bytes(4, "big") + b"\x00" + (2).to_bytes(3, "big") + b"hi"
    assert server.receive_data(frame) == []
    client = SpdyConnection(server=False)
    client.open_stream({})  # stream 1, so that the reset is for a stream it knows
    assert client.receive_data(server.data_to_send()) == [StreamReset(9, 2)]


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (b"\x80\x02\x00\x01\x00\x00\x00\x00", "version 2"),
        (b"\x80\x03\x00\x01\x00\xff\xff\xff", "frame"),  # 16 MiB declared
        (b"\x80\x03\x00\x01\x00\x00\x00\x04" + b"\x00" * 4, "short SYN_STREAM"),
        (b"\x80\x03\x00\x01\x00\x00\x00\x0c" + (2).to_bytes(4, "big") + b"\x00" * 8, "parity"),
        (
            b"\x80\x03\x00\x01\x00\x00\x00\x0c" + (1).to_bytes(4, "big") + b"\x00" * 6 + b"zz",
            "inflate",
        ),
        (b"\x80\x03\x00\x03\x00\x00\x00\x04" + b"\x00" * 4, "RST_STREAM"),
        (b"\x00\x00\x00\x00\x00\x00\x00\x00", "stream 0"),
    ],
)
def test_malformed_frames_end_the_connection_with_goaway(frame: bytes, why: str) -> None:
    server = SpdyConnection(server=True)
    with pytest.raises(SpdyProtocolError) as caught:
        server.receive_data(frame)
    assert why.split()[0].lower() in str(caught.value).lower()
    goaway = server.data_to_send()
    assert goaway[:4] == b"\x80\x03\x00\x07" and goaway[-4:] == (1).to_bytes(4, "big")
    assert server.receive_data(b"more") == []  # closed: nothing else is parsed


def test_a_header_bomb_is_refused() -> None:
    client, server = SpdyConnection(server=False), SpdyConnection(server=True)
    client.open_stream({"big": ["a" * 200_000]})
    with pytest.raises(SpdyProtocolError, match="over"):
        server.receive_data(client.data_to_send())


@FUZZ
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=50))
def test_random_bytes_only_raise_the_protocol_error(data: bytes, cut: int) -> None:
    server = SpdyConnection(server=True, max_frame_bytes=4096)
    try:
        for i in range(0, len(data), cut):
            server.receive_data(data[i : i + cut])
    except SpdyProtocolError:
        assert server.closed


@FUZZ
@given(st.data())
def test_mutated_valid_traffic_only_raises_the_protocol_error(data) -> None:
    client = SpdyConnection(server=False)
    client.open_stream({"streamtype": ["stdin"]})
    client.send_data(1, b"payload", fin=True)
    wire = bytearray(client.data_to_send())
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        i = data.draw(st.integers(min_value=0, max_value=len(wire) - 1))
        wire[i] = data.draw(st.integers(min_value=0, max_value=255))
    server = SpdyConnection(server=True)
    try:
        server.receive_data(bytes(wire))
    except SpdyProtocolError:
        pass


def _client_for(server: RemoteCommandServer, kinds: list[str]) -> SpdyConnection:
    client = SpdyConnection(server=False)
    for kind in kinds:
        client.open_stream({"streamtype": [kind]})
    return client


def test_remote_command_ready_stdin_resize_and_status() -> None:
    server = RemoteCommandServer(stdin=True, stdout=True, stderr=False, tty=True)
    client = _client_for(server, ["error", "stdin", "stdout", "resize"])
    events = server.receive_data(client.data_to_send())
    assert events == [Ready()]
    client.send_data(3, b"ls\n")
    resize = json.dumps({"Width": 80, "Height": 24}).encode()
    client.send_data(7, resize[:5])
    assert server.receive_data(client.data_to_send()) == [Stdin(b"ls\n", False)]
    client.send_data(7, resize[5:] + b'{"Width":100,"Height":30}')
    assert server.receive_data(client.data_to_send()) == [Resize(80, 24), Resize(100, 30)]
    server.write(1, b"out")
    server.write(2, b"tty: stderr goes to stdout")
    server.finish(3)
    events = client.receive_data(server.data_to_send())
    data = {(e.stream_id, e.data) for e in events if isinstance(e, DataReceived) and e.data}
    status = json.dumps(exit_status(3)).encode()
    assert data == {(5, b"out"), (5, b"tty: stderr goes to stdout"), (1, status)}
    assert exit_status(3)["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert exit_status(0) == {"metadata": {}, "status": "Success"}


@pytest.mark.parametrize(
    ("kinds", "payload"),
    [
        (["error", "bogus"], None),
        (["error", "error"], None),
        (["error", "stdin", "stdout", "resize"], b'{"Width": -1, "Height": 2}'),
        (["error", "stdin", "stdout", "resize"], b"[1, 2]"),
        (["error", "stdin", "stdout", "resize"], b"{" * 5000),
    ],
)
def test_remote_command_refuses_bad_channels(kinds, payload) -> None:
    server = RemoteCommandServer(stdin=True, stdout=True, stderr=False, tty=True)
    client = _client_for(server, kinds)
    if payload is not None:
        server.receive_data(client.data_to_send())
        client.send_data(7, payload)
    with pytest.raises(SpdyProtocolError):
        server.receive_data(client.data_to_send())


def test_protocol_negotiation() -> None:
    assert negotiate(["v4.channel.k8s.io", "v3.channel.k8s.io"]) == "v4.channel.k8s.io"
    assert negotiate(["channel.k8s.io"]) == "channel.k8s.io"
    assert negotiate(["v5.channel.k8s.io"]) is None


def _pf_client(*streams: dict) -> SpdyConnection:
    client = SpdyConnection(server=False)
    for headers in streams:
        client.open_stream(headers)
    return client


def test_port_forward_pairs_data_and_errors() -> None:
    from protocol.spdy.portforward import Data, Pair, PortForwardServer

    server = PortForwardServer()
    client = _pf_client(
        {"streamtype": ["error"], "port": ["8080"], "requestid": ["0"]},
        {"streamtype": ["data"], "port": ["8080"], "requestid": ["0"]},
    )
    assert server.receive_data(client.data_to_send()) == [Pair("0", 8080)]
    client.send_data(3, b"GET /", fin=True)
    assert server.receive_data(client.data_to_send()) == [Data("0", b"GET /", True)]
    server.write("0", b"200")
    server.error("0", "boom")
    server.close("0")
    events = client.receive_data(server.data_to_send())
    got = [(e.stream_id, e.data, e.fin) for e in events if isinstance(e, DataReceived)]
    assert (3, b"200", False) in got and (1, b"boom", False) in got
    assert (3, b"", True) in got and (1, b"", True) in got


@pytest.mark.parametrize(
    "headers",
    [
        {"streamtype": ["data"], "port": ["8080"]},  # no requestID
        {"streamtype": ["data"], "port": ["http"], "requestid": ["1"]},
        {"streamtype": ["data"], "port": ["70000"], "requestid": ["1"]},
        {"streamtype": ["stdin"], "port": ["80"], "requestid": ["1"]},
        # Regression (break1): str.isdigit() is true for "²" and other Unicode digits,
        # and int("²") raised ValueError out of the sans-I/O server.
        {"streamtype": ["data"], "port": ["8²"], "requestid": ["1"]},
        {"streamtype": ["data"], "port": ["\u0668\u0660"], "requestid": ["1"]},  # Arabic-Indic 80
        {"streamtype": ["data"], "port": ["0"], "requestid": ["1"]},
        {"streamtype": ["data"], "port": ["9" * 5000], "requestid": ["1"]},
    ],
)
def test_port_forward_refuses_bad_streams(headers) -> None:
    from protocol.spdy.portforward import PortForwardServer

    with pytest.raises(SpdyProtocolError):
        PortForwardServer().receive_data(_pf_client(headers).data_to_send())
