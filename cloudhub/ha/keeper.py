"""An event loop on a thread of its own, for the replica Lease's renewals.

A replica that fences itself closes every session it serves, and its agents come back at
once: on a loaded machine that burst is what made the loop late in the first place. On 2
cores, a 10,000-node ramp put each replica's serving loop up to 6.4 s behind (2026-12-05),
past the 5 s its Lease is counted valid, so each replica fenced itself about every 15 s
while the API was idle: the renewal PATCH, queued behind thousands of handshakes on the
same loop, went out late.

The Lease's renewals therefore run here, on their own loop and their own API client, as
kube-controller-manager's leader election runs apart from its controllers' queues. The
interpreter's switch interval (5 ms) lets this thread run however busy the serving loop
is, and a renewal needs well under a millisecond of it. What fencing is for stays: a
replica that cannot reach the API still fences itself, and one whose serving loop has
*stopped* (not merely fallen behind) stops renewing after ``ha.loop_stall_max`` seconds
(:mod:`cloudhub.ha.replicas`), so that a hung replica's nodes still go to the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An asyncio loop running in a daemon thread until :meth:`close`.

    Args:
        name: the thread's name (it shows in py-spy and in a fault handler's dump).
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this thread's loop and await its result from the caller's loop.

        Cancelling the caller cancels ``coro`` there.

        Raises:
            Whatever ``coro`` raises; RuntimeError: the thread was closed.
        """
        if self.loop.is_closed() or not self._thread.is_alive():
            coro.close()  # closed, or stopped by a close() whose join timed out
            raise RuntimeError("the loop thread is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self, timeout: float = 10.0) -> None:
        """Cancel what still runs there, stop the loop and join the thread (at most
        ``timeout`` seconds). Idempotent."""
        if self.loop.is_closed():
            return

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(drain(), self.loop).result(timeout)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
