"""Waiting for a process to go quiet before an idle measurement window.

A benchmark that reports idle figures (CPU, writes, bytes) starts its window once the
start-up work (the first commits, status writes, connection set-up) is over. A fixed
sleep guesses how long that takes, too short on a loaded machine and too long elsewhere;
:func:`cpu_settled` observes it instead: it samples the process's CPU time over short
windows and returns once one window used less than ``quiet`` of a core.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import time

__all__ = ["cpu_seconds", "cpu_settled", "cpu_settled_sync"]

#: Seconds of one sample window.
WINDOW_S = 0.5
#: Fraction of one core under which a window counts as quiet (idle agents use ~1%).
QUIET = 0.05


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (``/proc/PID/stat``).

    Raises:
        FileNotFoundError: no such process.
    """
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu_settled(
    pid: int, timeout: float = 60.0, *, quiet: float = QUIET, window_s: float = WINDOW_S
) -> float:
    """Wait until process ``pid`` used less than ``quiet`` of a core over one window.

    Args:
        pid: the process measured next.
        timeout: seconds; after it the caller measures anyway (the figure will say so).
        quiet: fraction of one core.
        window_s: seconds per sample window (the measurement's clock tick is 10 ms).

    Returns:
        Seconds it took (the windows sampled).
    """
    started = time.monotonic()
    while True:
        c0, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(window_s)  # the sample window: counting, not waiting
        c1, t1 = cpu_seconds(pid), time.monotonic()
        if (c1 - c0) / (t1 - t0) < quiet or t1 - started > timeout:
            return t1 - started


def cpu_settled_sync(
    pid: int, timeout: float = 60.0, *, quiet: float = QUIET, window_s: float = WINDOW_S
) -> float:
    """:func:`cpu_settled` for a benchmark without an event loop."""
    started = time.monotonic()
    while True:
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(window_s)  # the sample window: counting, not waiting
        c1, t1 = cpu_seconds(pid), time.monotonic()
        if (c1 - c0) / (t1 - t0) < quiet or t1 - started > timeout:
            return t1 - started
