"""The WebSocket exec channel framing (``cloudhub.kubelet.wsexec.decode``/``encode``): a
client's message is a channel byte (or, base64, a channel digit) and data; every malformed
message is a ``ChannelError`` (the connection ends), nothing else escapes."""

from __future__ import annotations

import pytest

from cloudhub.kubelet.wsexec import ChannelError, decode, encode


@pytest.mark.parametrize("b64", [False, True])
def test_stdin_and_resize_round_trip(b64: bool) -> None:
    for channel, data in ((0, b"ls -l\n"), (4, b'{"Width":80,"Height":24}'), (0, b"")):
        assert decode(encode(channel, data, b64=b64), b64=b64) == (channel, data)


@pytest.mark.parametrize(
    ("message", "b64", "words"),
    [
        (b"", False, "empty"),
        ("", True, "empty"),
        (b"\x01out", False, "may not write channel 1"),
        ("1b3V0", True, "may not write channel 1"),
        ("xAAAA", True, "not a digit"),
        ("0!!!", True, "bad base64"),
        ("0\u00e9t\u00e9", True, "bad base64"),
        # Regression (break1): "²".isdigit() is true and int("²") raised ValueError.
        ("\u00b2AAAA", True, "not a digit"),
        ("\u0660AAAA", True, "not a digit"),  # Arabic-Indic zero
        (b"\xb2AAAA", True, "not a digit"),
    ],
)
def test_malformed_messages_are_channel_errors(message, b64: bool, words: str) -> None:
    with pytest.raises(ChannelError, match=words):
        decode(message, b64=b64)
