"""Exponential backoff with full jitter, as a pure generator."""

from __future__ import annotations

import random
from collections.abc import Iterator

__all__ = ["backoff_delays"]


def backoff_delays(
    base_s: float = 0.2, cap_s: float = 30.0, rng: random.Random | None = None
) -> Iterator[float]:
    """Delays before successive retries: uniform in ``[0, min(cap, base * 2**n)]``.

    "Full jitter" spreads the retries of many clients that failed together
    (AWS architecture blog, "Exponential Backoff And Jitter").

    Args:
        base_s: the first ceiling, seconds.
        cap_s: the largest ceiling, seconds.
        rng: the random source (a seeded one in tests).
    """
    rng = rng or random.Random()
    attempt = 0
    while True:
        yield rng.uniform(0, min(cap_s, base_s * 2**attempt))
        attempt = min(attempt + 1, 32)
