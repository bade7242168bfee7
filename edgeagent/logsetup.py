"""The agent's log lines: timestamped, unless journald already stamps them.

Under systemd with ``StandardError=journal`` (the unit's default), journald records each
line's time, unit and priority itself: the agent then writes ``<N>LEVEL logger: message``,
where ``<N>`` is the syslog priority journald reads from the line's start (sd-daemon(3):
``journalctl -p err`` then finds the agent's errors). Anywhere else (a terminal, a file,
a container's log, ``nohup``), every line starts with its UTC time to the millisecond,
``2026-12-02T06:35:10.123Z``, so that a log read later can still be put in order against
the hub's.

Whether stderr is the journal is what ``$JOURNAL_STREAM`` says (systemd.exec(5)): the
``device:inode`` of the stream systemd connected, compared with stderr's own, so that a
child whose stderr was redirected elsewhere is not fooled by the inherited variable.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import IO

__all__ = ["TIMESTAMPED_FORMAT", "configure_logging", "journald_stream"]

TIMESTAMPED_FORMAT = "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s"
"""Lines outside journald: UTC time, level, logger, message."""

_JOURNAL_FORMAT = "<%(priority)d>%(levelname)s %(name)s: %(message)s"

_PRIORITY = {
    logging.CRITICAL: 2,  # LOG_CRIT
    logging.ERROR: 3,  # LOG_ERR
    logging.WARNING: 4,  # LOG_WARNING
    logging.INFO: 6,  # LOG_INFO
    logging.DEBUG: 7,  # LOG_DEBUG
}


def journald_stream(env: Mapping[str, str], stream: IO[str]) -> bool:
    """True when ``stream`` is the journal stream systemd gave this process.

    Args:
        env: the process environment (``JOURNAL_STREAM`` is read).
        stream: the stream the logs go to (its file descriptor is ``fstat``-ed).
    """
    device, sep, inode = env.get("JOURNAL_STREAM", "").partition(":")
    if not sep or not device.isdigit() or not inode.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no file descriptor (a test's buffer)
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.priority = _PRIORITY.get(record.levelno, 6 if record.levelno < 30 else 3)
        return super().format(record)


def configure_logging(level: str, *, env: Mapping[str, str], stream: IO[str]) -> None:
    """Send the agent's logs to ``stream`` at ``level`` (see the module docstring).

    Args:
        level: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR`` (another name means INFO).
        env: the process environment.
        stream: where the lines go (stderr).
    """
    handler = logging.StreamHandler(stream)
    if journald_stream(env, stream):
        handler.setFormatter(_JournalFormatter(_JOURNAL_FORMAT))
    else:
        formatter = logging.Formatter(TIMESTAMPED_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
