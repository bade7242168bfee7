"""Structured logs: one JSON object per line, or ``key=value`` text for a terminal.

Every line about a node names it: code logging about a node passes ``extra={"node": name}``
(sessions use a ``LoggerAdapter`` that adds ``node`` and ``session``), and both formats print
those fields. The JSON keys are ``time`` (RFC 3339 with milliseconds, UTC), ``level``,
``logger``, ``message``, then ``node``, ``session`` and any other extra field, then
``exception`` when there is one.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any, TextIO

__all__ = ["JSONFormatter", "TextFormatter", "setup_logging"]

# Attributes every LogRecord has; anything else came from ``extra``.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys() | {"message", "asctime"}
)
_FIRST = ("node", "session")


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    extras = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
    ordered = {k: extras.pop(k) for k in _FIRST if k in extras}
    ordered.update(extras)
    return ordered


def _time(record: logging.LogRecord) -> str:
    stamp = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


class JSONFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extras(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{_time(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def setup_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) in ``fmt`` (``json`` or ``text``) at
    ``level`` and above; replaces the root logger's handlers."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
