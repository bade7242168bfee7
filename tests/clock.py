"""A wall clock a test moves by hand, for expiry rules (tokens, certificates) reached
without waiting for them; pass it wherever the product takes ``clock=``."""

from __future__ import annotations

import time

__all__ = ["ManualClock"]


class ManualClock:
    """Seconds since the epoch, starting at the real time and moving only by
    :meth:`advance` (``clock()`` reads it, as ``time.time()`` would be read)."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward; returns the new time."""
        self.now += seconds
        return self.now
