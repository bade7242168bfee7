"""Structured log formats: every field of a record about a node is printed."""

from __future__ import annotations

import io
import json
import logging

import pytest

from cloudhub.observability.logs import JSONFormatter, TextFormatter, setup_logging


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
