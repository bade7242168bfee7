"""A small owner for background tasks (Python 3.10 has no ``asyncio.TaskGroup``).

Every task the agent starts belongs to a :class:`TaskSet` whose owner cancels and awaits
them all (STYLE.md §8). Unlike a TaskGroup, one task failing does not cancel its
siblings: a pod worker's bug must not stop the other pods. Failures are logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["TaskSet", "wait_event"]

log = logging.getLogger(__name__)


class TaskSet:
    """Tasks owned together: :meth:`close` cancels and awaits every one still running."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Start ``coro`` as a task owned by this set."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self._name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel every task and wait for all of them to finish."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass, whichever comes first.

    Use it instead of ``asyncio.wait_for(event.wait(), timeout)`` in loops: on Python 3.11
    and earlier, ``wait_for`` loses a cancellation that arrives in the same loop iteration
    as the event being set (it returns normally; the task is no longer cancelled), so a
    loop woken while its owner cancels it runs on and the owner's ``close()`` never returns
    (measured: 200 of 200 times). ``asyncio.wait`` does not lose it.

    Returns:
        True if the event is set, False on timeout.

    Raises:
        asyncio.CancelledError: the caller was cancelled (always propagated).
    """
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        if not waiter.done():
            waiter.cancel()
    return event.is_set()
