"""Structured log formats: every field of a record about a node is printed."""

from __future__ import annotations

import io
import json
import logging

import pytest

from cloudhub.observability.logs import JSONFormatter, LogSummary, TextFormatter, setup_logging
from tests.waiting import eventually


def record(**extra) -> logging.LogRecord:
    logger = logging.getLogger("cloudhub.test")
    rec = logger.makeRecord("cloudhub.test", logging.WARNING, "f.py", 1, "refused %s", ("x",), None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_json_has_time_level_logger_message_then_node_and_extras() -> None:
    line = JSONFormatter().format(record(node="edge-1", session="s-1", seq=7))
    out = json.loads(line)
    assert list(out)[:6] == ["time", "level", "logger", "message", "node", "session"]
    assert out["message"] == "refused x" and out["level"] == "warning"
    assert out["node"] == "edge-1" and out["seq"] == 7
    assert out["time"].endswith("Z") and len(out["time"]) == 24


def test_text_appends_fields_and_exceptions() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        rec = record(node="edge-2")
        rec.exc_info = sys.exc_info()
    text = TextFormatter().format(rec)
    first, *rest = text.splitlines()
    assert first.endswith("cloudhub.test: refused x node=edge-2")
    assert any("ValueError: boom" in line for line in rest)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_setup_logging_replaces_the_root_handlers(fmt: str) -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        setup_logging(fmt, "debug", stream)
        logging.getLogger("cloudhub.x").debug("hello", extra={"node": "n"})
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)
    assert "hello" in stream.getvalue() and "n" in stream.getvalue()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_burst_logs_the_first_of_each_kind_then_one_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="cloudhub.test.summary")
    clock = FakeClock()
    summary = LogSummary(
        logging.getLogger("cloudhub.test.summary"), "turned %d more sessions away",
        interval=10.0, monotonic=clock,
    )  # fmt: skip
    for i in range(500):
        summary.warning("OVERLOADED", f"turned a session away: busy {i}", {"node": f"n-{i}"})
    summary.warning("GOING_AWAY", "turned a session away: served elsewhere", {"node": "x"})
    assert _warnings(caplog) == [
        "turned a session away: busy 0",
        "turned a session away: served elsewhere",
    ]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 499 and debug[-1].node == "n-499"  # every one, at debug
    clock.now += 10.0
    summary.warning("OVERLOADED", "turned a session away: busy again", {"node": "n-0"})
    assert _warnings(caplog)[2:] == [
        "turned 499 more sessions away in the last 10 s (OVERLOADED); "
        "the latest: turned a session away: busy 499",
        "turned a session away: busy again",  # a new window opens with a full line
    ]
    summary.close()  # nothing counted in the new windows: no summary
    assert len(_warnings(caplog)) == 4


async def test_a_burst_that_stops_is_summarised_when_its_window_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cloudhub.test.summary")
    summary = LogSummary(logging.getLogger("cloudhub.test.summary"), "dropped %d", interval=0.2)
    for _ in range(3):
        summary.warning("K", "dropped one")
    await eventually(lambda: len(_warnings(caplog)) == 2, "the summary logged", timeout=5.0)
    assert _warnings(caplog)[1] == "dropped 2 in the last 0.2 s (K); the latest: dropped one"
    summary.close()


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        LogSummary(logging.getLogger("x"), "n %d", interval=0)
