"""``TaskScope``: the one owner of background tasks in both programs (STYLE.md §8).

Python 3.10 has no ``asyncio.TaskGroup``; this is the subset the hub and the agent need,
with two differences from it:

- :meth:`TaskScope.aclose` cancels whatever still runs instead of waiting for it, so
  closing a connection or a component is bounded;
- ``cancel_siblings=False`` makes a scope in which one task's failure is reported and the
  others go on (the agent's pod workers: one pod's bug must not stop the other pods).

Every task started through a scope is cancelled and awaited by its owner's
:meth:`~TaskScope.aclose` (or :meth:`~TaskScope.cancel_all`); none outlives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["TaskScope"]

FailureCallback = Callable[[asyncio.Task[Any], BaseException], None]


class TaskScope:
    """Owns a set of tasks.

    Args:
        on_failure: called with the task and the exception it raised (never for a
            cancellation): for the first failure only when ``cancel_siblings`` is true,
            before the siblings are cancelled; for every failure otherwise.
        cancel_siblings: whether the first failure cancels every other task of the scope
            (a connection's reader, writer and keepalive: the default) or not (independent
            workers).
        name: a prefix for the tasks' names (``"{name}:{task name}"``), or ``None``.
    """

    def __init__(
        self,
        on_failure: FailureCallback | None = None,
        *,
        cancel_siblings: bool = True,
        name: str | None = None,
    ) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._on_failure = on_failure
        self._cancel_siblings = cancel_siblings
        self._name = name
        self._failed: BaseException | None = None
        self._closed = False

    @property
    def failure(self) -> BaseException | None:
        """The first exception a task raised, if any."""
        return self._failed

    def __len__(self) -> int:
        """How many of the scope's tasks are still running."""
        return len(self._tasks)

    def create_task(
        self, coro: Coroutine[Any, Any, Any], *, name: str | None = None
    ) -> asyncio.Task[Any]:
        """Start ``coro`` as a task owned by this scope.

        Raises:
            RuntimeError: the scope is closed (the coroutine is closed, not run).
        """
        if self._closed:
            coro.close()
            raise RuntimeError("task scope is closed")
        if self._name is not None and name is not None:
            name = f"{self._name}:{name}"
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        first = self._failed is None
        if first:
            self._failed = exc
        if not self._cancel_siblings:
            if self._on_failure is not None:
                self._on_failure(task, exc)
        elif first:
            if self._on_failure is not None:
                self._on_failure(task, exc)
            self.cancel()

    def cancel(self) -> None:
        """Cancel every task still running (returns at once)."""
        for task in list(self._tasks):
            task.cancel()

    async def cancel_all(self) -> None:
        """Cancel every task still running and wait until all have finished; the scope
        stays open for new tasks.

        Safe to call from one of the scope's own tasks (that task is not awaited).
        """
        current = asyncio.current_task()
        pending = [t for t in self._tasks if t is not current]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def aclose(self) -> None:
        """Refuse new tasks, then cancel every task still running and wait until all have
        finished (as :meth:`cancel_all`)."""
        self._closed = True
        await self.cancel_all()
