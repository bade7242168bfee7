"""A token bucket for API writes (QPS with burst), as client-go's flowcontrol does.

A reconnecting fleet must not flood the API: every write the hub makes on behalf of
edge nodes waits for a token. ``qps`` tokens arrive per second up to ``burst``.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["TokenBucket"]


class TokenBucket:
    """Rate limiter: at most ``burst`` at once, ``qps`` per second sustained.

    Args:
        qps: tokens per second (> 0).
        burst: bucket size (>= 1); the bucket starts full.
        clock: monotonic clock in seconds (injectable for tests of the arithmetic).

    Raises:
        ValueError: qps <= 0 or burst < 1.
    """

    def __init__(self, qps: float, burst: int, *, clock=time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    def try_acquire(self) -> bool:
        """Take a token if one is there now; never waits."""
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def acquire(self) -> None:
        """Wait until a token is available, then take it (FIFO among waiters)."""
        async with self._lock:
            while True:
                self._refill()
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self.qps)
