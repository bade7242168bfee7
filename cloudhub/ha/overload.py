"""Admission control: turn new sessions away with ``OVERLOADED`` while the hub's event loop
lags, instead of accepting handshakes it cannot finish (issue 18 item 4).

:class:`LoopLag` samples how late the event loop wakes a timer (every
``interval`` seconds) and keeps the worst sample of the last ``hold`` seconds: a hub busy
with a burst of handshakes or a relist shows a lag of hundreds of milliseconds. While that
lag exceeds ``ha.overload_lag``, :meth:`LoopLag.admit` (an ``EdgeServer.admission`` hook)
refuses each new session with ``OVERLOADED`` and ``retry_after`` drawn uniformly from
``[0, ha.overload_retry_max]`` (full jitter, as AWS's "Exponential Backoff And Jitter"
recommends: the refused come back spread, not as one second wave). Sessions already
served are left alone: refusing new ones is what lets the loop catch up with them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from cloudhub.bridge.server import Refusal
from protocol.errors import CloseCode

__all__ = ["LoopLag"]


class LoopLag:
    """Event loop lag, sampled, and the admission hook that acts on it.

    Args:
        threshold: seconds of lag above which new sessions are refused (> 0).
        retry_max: the largest ``retry_after`` handed out, seconds.
        interval: seconds between samples.
        hold: seconds a bad sample counts (the worst of this window is the lag).
        monotonic: the clock.
        jitter: ``() -> [0, 1)``.
    """

    def __init__(
        self,
        threshold: float,
        retry_max: float,
        *,
        interval: float = 0.1,
        hold: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if threshold <= 0 or retry_max <= 0 or interval <= 0 or hold < interval:
            raise ValueError("threshold, retry_max, interval > 0 and hold >= interval")
        self.threshold = threshold
        self.retry_max = retry_max
        self.interval = interval
        self.hold = hold
        self._monotonic = monotonic
        self._jitter = jitter
        self._samples: deque[tuple[float, float]] = deque()  # (when, lag seconds)
        self.refused = 0
        """Sessions refused so far."""

    def sample(self, lag: float) -> None:
        """Record one measured lag (seconds)."""
        now = self._monotonic()
        samples = self._samples
        samples.append((now, max(0.0, lag)))
        while samples and samples[0][0] < now - self.hold:
            samples.popleft()

    @property
    def lag(self) -> float:
        """The worst lag of the last ``hold`` seconds, seconds."""
        now = self._monotonic()
        return max((lag for at, lag in self._samples if at >= now - self.hold), default=0.0)

    @property
    def behind(self) -> bool:
        """Whether the loop is later than ``threshold`` (new sessions are refused)."""
        return self.lag > self.threshold

    async def run(self) -> None:
        """Sample until cancelled (the interval paces the samples; it is what is measured)."""
        while True:
            start = self._monotonic()
            await asyncio.sleep(self.interval)
            self.sample(self._monotonic() - start - self.interval)

    async def admit(self, link: Any) -> Refusal | None:
        """``EdgeServer.admission`` hook: ``OVERLOADED`` with a full-jitter ``retry_after``
        while the lag exceeds the threshold, else ``None``."""
        if not self.behind:
            return None
        lag = self.lag
        self.refused += 1
        return Refusal(
            CloseCode.OVERLOADED,
            f"hub overloaded: its event loop is {lag * 1000:.0f} ms behind",
            retry_after=self._jitter() * self.retry_max,
        )
