"""The worker pool shared by the hub's API writers (pod status, Events, Device status):
N tasks draining one in-memory queue, owned by a task scope so none outlives the writer."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from protocol.tasks import TaskScope

__all__ = ["next_item", "run_workers"]

T = TypeVar("T")


async def run_workers(
    scope: TaskScope, worker: Callable[[], Coroutine[Any, Any, None]], count: int, name: str
) -> None:
    """Start ``count`` copies of ``worker`` (tasks ``name-0`` …) in ``scope`` and run until
    cancelled; then close the scope (which cancels them)."""
    for i in range(count):
        scope.create_task(worker(), name=f"{name}-{i}")
    try:
        await asyncio.Event().wait()
    finally:
        await scope.aclose()


async def next_item(queue: deque[T], wake: asyncio.Event) -> T:
    """The oldest item of ``queue``, waiting on ``wake`` (set by whoever appends) while it
    is empty."""
    while not queue:
        wake.clear()
        await wake.wait()
    return queue.popleft()
