"""A small task group: each connection owns one, so that nothing outlives the connection.

Python 3.10 has no ``asyncio.TaskGroup``; this is the subset the transports need, with one
difference that suits a connection: :meth:`TaskScope.aclose` cancels whatever still runs
instead of waiting for it, so closing a connection is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["TaskScope"]


class TaskScope:
    """Owns a set of tasks: the first one to fail cancels its siblings.

    Args:
        on_failure: called once with the first exception a task raises (not for
            cancellation), before the siblings are cancelled.
    """

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._on_failure = on_failure
        self._failed: BaseException | None = None
        self._closed = False

    @property
    def failure(self) -> BaseException | None:
        """The first exception a task raised, if any."""
        return self._failed

    def create_task(
        self, coro: Coroutine[Any, Any, Any], *, name: str | None = None
    ) -> asyncio.Task:
        """Start ``coro`` as a task owned by this scope.

        Raises:
            RuntimeError: the scope is closed (the coroutine is closed, not run).
        """
        if self._closed:
            coro.close()
            raise RuntimeError("task scope is closed")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and self._failed is None:
            self._failed = exc
            if self._on_failure is not None:
                self._on_failure(exc)
            self.cancel()

    def cancel(self) -> None:
        """Cancel every task still running (returns at once)."""
        for task in list(self._tasks):
            task.cancel()

    async def aclose(self) -> None:
        """Cancel every task still running and wait until all have finished.

        Safe to call from one of the scope's own tasks (that task is not awaited).
        """
        self._closed = True
        current = asyncio.current_task()
        pending = [t for t in self._tasks if t is not current]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
