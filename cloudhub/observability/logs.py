"""Structured logs: one JSON object per line, or ``key=value`` text for a terminal.

Every line about a node names it: code logging about a node passes ``extra={"node": name}``
(sessions use a ``LoggerAdapter`` that adds ``node`` and ``session``), and both formats print
those fields. The JSON keys are ``time`` (RFC 3339 with milliseconds, UTC), ``level``,
``logger``, ``message``, then ``node``, ``session`` and any other extra field, then
``exception`` when there is one.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["JSONFormatter", "LogSummary", "TextFormatter", "setup_logging"]

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


class LogSummary:
    """Warnings that come in bursts (a fleet turned away during a reconnect storm), logged
    as the first of each kind and then one summary per ``interval``.

    The first record of a kind in a window is logged in full; the others of that window
    are counted (and logged at debug, with their node), and when the window ends one
    warning says how many of each kind there were and the latest message. A 10,000-node
    ramp turned 17,000 sessions away per replica in 3 minutes: one line each buried what
    else the hub said.

    Args:
        logger: where the lines go.
        what: the summary's subject, e.g. ``"turned %d more sessions away"``: one ``%d``.
        interval: seconds a window lasts (> 0).
        monotonic: the clock.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.logger = logger
        self.what = what
        self.interval = interval
        self._monotonic = monotonic
        self._started: dict[str, float] = {}  # kind -> its window's start
        self._counts: Counter[str] = Counter()  # kind -> records counted, not logged
        self._latest: dict[str, tuple[str, Any]] = {}  # kind -> (message, extra)
        self._flush: asyncio.TimerHandle | None = None

    def warning(self, kind: str, message: str, extra: dict[str, Any] | None = None) -> None:
        """Log ``message`` (a warning of ``kind``) in full if it is the first of its kind
        in this window, else count it."""
        now = self._monotonic()
        started = self._started.get(kind)
        if started is not None and now - started >= self.interval:
            self.flush(kind)
            started = None
        if started is None:
            self._started[kind] = now
            self.logger.warning(message, extra=extra)
            return
        self._counts[kind] += 1
        self._latest[kind] = (message, extra)
        self.logger.debug(message, extra=extra)
        if self._flush is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop: the next record of the kind flushes
            self._flush = loop.call_later(self.interval, self._flush_due)

    def _flush_due(self) -> None:
        self._flush = None
        now = self._monotonic()
        for kind, started in list(self._started.items()):
            if now - started >= self.interval - 1e-3:
                self.flush(kind)
        if self._counts and self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self.interval, self._flush_due)

    def flush(self, kind: str) -> None:
        """End ``kind``'s window: one summary warning if any were counted."""
        self._started.pop(kind, None)
        count = self._counts.pop(kind, 0)
        latest = self._latest.pop(kind, None)
        if count and latest is not None:
            message, extra = latest
            self.logger.warning(
                f"{self.what} in the last %g s (%s); the latest: %s",
                count,
                self.interval,
                kind,
                message,
                extra=extra,
            )

    def close(self) -> None:
        """Log what is counted and stop the timer."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        for kind in list(self._started):
            self.flush(kind)
