"""Waiting on a condition in tests: the one polling helper every test uses.

A test that waits for something another task, thread or process brings about either
awaits an ``asyncio.Event`` the code under test sets, or polls the condition itself with
:func:`eventually` (async) or :func:`eventually_sync` (a thread, or a test without a
loop). Never a bare ``sleep`` standing in for "long enough".

Polling starts at 20 ms and doubles up to 250 ms: a condition that holds at once costs
one check, one that takes seconds costs a few dozen, and the machine is not kept busy.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds a condition may take by default: generous, for a loaded 2-core CI machine
#: (a deadline only matters when the test fails anyway).
DEFAULT_TIMEOUT_S = 60.0

_FIRST_DELAY_S = 0.02
_MAX_DELAY_S = 0.25


async def eventually(
    check: Callable[[], Awaitable[T] | T],
    what: str = "",
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    interval: float | None = None,
    state: Callable[[], object] | None = None,
) -> T:
    """Poll ``check()`` until it returns something truthy; return that value.

    Args:
        check: a function, sync or async, of no arguments; polled until truthy.
        what: the condition in words, for the failure message.
        timeout: seconds before the test fails.
        interval: seconds between checks, fixed, for a check that samples a sequence of
            passing states (a restart count, a waiting reason); default: back off from
            20 ms to 250 ms.
        state: called once on failure; its value ends the message (what was seen last).

    Returns:
        The first truthy value ``check()`` returned.

    Raises:
        pytest.fail.Exception: not within ``timeout`` seconds (AssertionError where
            pytest is not installed: a benchmark's run).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = interval or _FIRST_DELAY_S
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            _fail(timeout, what or check, state)
        await asyncio.sleep(delay)
        if interval is None:
            delay = min(delay * 2, _MAX_DELAY_S)


def eventually_sync(
    check: Callable[[], T],
    what: str = "",
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    state: Callable[[], object] | None = None,
    otherwise: Callable[[], T] | None = None,
) -> T:
    """:func:`eventually` for code without an event loop (a thread, a plain test).

    Args:
        check: a function of no arguments; polled until truthy.
        what: the condition in words, for the failure message.
        timeout: seconds before the test fails.
        state: called once on failure; its value ends the message.
        otherwise: called instead of failing when ``timeout`` passes, for a helper
            whose deadline is not a failure (SIGKILL what did not end on SIGTERM) or
            that raises its own error (with a log attached); its value is returned.

    Returns:
        The first truthy value ``check()`` returned, or ``otherwise()``'s.

    Raises:
        pytest.fail.Exception: not within ``timeout`` seconds (and no ``otherwise``).
    """
    deadline = time.monotonic() + timeout
    delay = _FIRST_DELAY_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            if otherwise is not None:
                return otherwise()
            _fail(timeout, what or check, state)
        time.sleep(delay)
        delay = min(delay * 2, _MAX_DELAY_S)


def _fail(timeout: float, what: object, state: Callable[[], object] | None) -> None:
    seen = f"; last seen: {state()}" if state is not None else ""
    message = f"timed out after {timeout:g} s waiting for {what}{seen}"
    try:  # imported here: the benchmarks use these helpers outside pytest too
        import pytest
    except ImportError:  # pragma: no cover - a benchmark run without the test extras
        raise AssertionError(message) from None
    pytest.fail(message)


__all__ = ["DEFAULT_TIMEOUT_S", "eventually", "eventually_sync"]
