"""The logs request's query (``cloudhub.kubelet.logs.log_params``): every bad value is a
``LogRequestError`` (answered 400), and what passes encodes into a ``stream_open``."""

from __future__ import annotations

import pytest

from cloudhub.kubelet.logs import LogRequestError, log_params
from protocol import encode
from protocol.stream_messages import StreamOpen


def test_good_values_become_stream_open_params() -> None:
    query = {"follow": "true", "tailLines": "10", "limitBytes": "500", "sinceSeconds": "60"}
    params = log_params(query, now=1000.0)
    assert params == {
        "follow": True,
        "timestamps": False,
        "previous": False,
        "tail_lines": 10,
        "limit_bytes": 500,
        "since_time": 940.0,
    }
    encode(StreamOpen(1, "logs", "default", "web-0", "c", 1024, params))


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"tailLines": "ten"}, "not an integer"),
        ({"tailLines": "-1"}, ">= 0"),
        # Regression (break1): beyond int64 the stream_open did not encode, and the caller
        # got "node X: b.params: cannot be encoded: Integer value out of range" as a 500.
        ({"tailLines": str(10**30)}, "at most 9223372036854775807"),
        ({"limitBytes": str(2**64)}, "at most"),
        ({"sinceSeconds": str(2**63)}, "at most"),
        ({"limitBytes": "0"}, "> 0"),
        ({"sinceSeconds": "0"}, "greater than 0"),
        ({"sinceSeconds": "5", "sinceTime": "2026-12-02T00:00:00Z"}, "at most one"),
        ({"sinceTime": "yesterday"}, "not an RFC 3339 time"),
        ({"sinceTime": "2026-12-02T00:00:00"}, "no time zone"),
    ],
)
def test_bad_values_are_refused_with_the_reason(query: dict[str, str], words: str) -> None:
    with pytest.raises(LogRequestError, match=words):
        log_params(query, now=1000.0)


def test_the_largest_int64_still_encodes() -> None:
    params = log_params({"tailLines": str(2**63 - 1), "limitBytes": str(2**63 - 1)}, now=0.0)
    encode(StreamOpen(1, "logs", "default", "web-0", "c", 1024, params))
