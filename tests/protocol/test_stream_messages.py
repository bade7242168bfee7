"""The day-2 stream kinds refuse out-of-range values on construction, naming the field,
and accept both ends of every range."""

from __future__ import annotations

import pytest

from protocol import InvalidMessage
from protocol.errors import ErrorCode
from protocol.stream_messages import (
    MAX_STREAM_CHUNK,
    StreamClose,
    StreamData,
    StreamOpen,
    StreamReset,
    StreamResize,
    StreamWindow,
)

TOP_ID = 2**32 - 1


@pytest.mark.parametrize(
    ("build", "field", "words"),
    [
        (lambda: StreamOpen(0, "logs", "ns", "p", "c", 0), "stream_id", "1..2**32-1"),
        (lambda: StreamOpen(TOP_ID + 1, "logs", "ns", "p", "c", 0), "stream_id", "1..2**32-1"),
        (lambda: StreamOpen(1, "shell", "ns", "p", "c", 0), "operation", "one of logs"),
        (lambda: StreamOpen(1, "logs", "ns", "p", "c", -1), "window", "0..2**31-1 bytes"),
        (lambda: StreamOpen(1, "logs", "ns", "p", "c", 2**31), "window", "0..2**31-1 bytes"),
        (lambda: StreamOpen(1, "logs", "", "p", "c", 0), "pod", "must not be empty"),
        (lambda: StreamData(1, 256, b""), "channel", "0..255"),
        (lambda: StreamData(1, -1, b""), "channel", "0..255"),
        (lambda: StreamData(1, 1, b"x" * (MAX_STREAM_CHUNK + 1)), "data", "at most"),
        (lambda: StreamWindow(1, 0), "credit", "1..2**31-1 bytes"),
        (lambda: StreamWindow(1, 2**31), "credit", "1..2**31-1 bytes"),
        (lambda: StreamResize(1, 0, 24), "width", "1..65535"),
        (lambda: StreamResize(1, 80, 65536), "height", "1..65535"),
        (lambda: StreamClose(0), "stream_id", "1..2**32-1"),
        (lambda: StreamReset(TOP_ID + 1, ErrorCode.INTERNAL), "stream_id", "1..2**32-1"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(build, field: str, words: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        build()
    assert info.value.field == field
    assert words in str(info.value)


def test_both_ends_of_every_range_are_accepted() -> None:
    StreamOpen(1, "exec", "ns", "p", "c", 0)
    StreamOpen(TOP_ID, "portforward", "ns", "p", "", 2**31 - 1)
    StreamData(1, 0, b"")
    StreamData(TOP_ID, 255, b"x" * MAX_STREAM_CHUNK)
    StreamWindow(1, 1)
    StreamWindow(1, 2**31 - 1)
    StreamResize(1, 1, 1)
    assert StreamResize(1, 65535, 65535).height == 65535
