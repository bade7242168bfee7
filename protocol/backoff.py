"""Reconnect policy as pure functions: exponential backoff with full jitter, and retryability.

"Full jitter" (Marc Brooker, AWS Architecture Blog, 2015): the n-th delay is drawn
uniformly from ``[0, min(cap, base * 2**n)]``. Spreading reconnects over the whole interval
is what keeps 10,000 edge nodes from reconnecting in lock-step after a hub restart.

The random draw is passed in, so this module stays deterministic and testable::

    import random
    delays = backoff(uniform=random.uniform)       # in the dialer
    await asyncio.sleep(next(delays))              # after each failed attempt
    delays = backoff(uniform=random.uniform)       # reset after a healthy session
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from protocol.errors import CloseCode

__all__ = ["DEFAULT_BASE", "DEFAULT_CAP", "backoff", "is_retryable", "retry_delay"]

DEFAULT_BASE = 1.0
"""Seconds: the ceiling of the first delay."""
DEFAULT_CAP = 60.0
"""Seconds: the largest ceiling; a node offline for hours still retries every <= 60 s."""


def backoff(
    *,
    uniform: Callable[[float, float], float],
    base: float = DEFAULT_BASE,
    cap: float = DEFAULT_CAP,
    factor: float = 2.0,
) -> Iterator[float]:
    """Yield reconnect delays forever: delay ``n`` is ``uniform(0, min(cap, base * factor**n))``.

    Args:
        uniform: the random draw, ``uniform(a, b) -> float`` in ``[a, b]``
            (``random.uniform``, or a fixed function in tests).
        base: seconds, the first ceiling (> 0).
        cap: seconds, the largest ceiling (>= ``base``).
        factor: growth of the ceiling per attempt (>= 1).

    Yields:
        Delays in seconds, each in ``[0, ceiling]``. Start a new generator to reset.

    Raises:
        ValueError: on a non-positive ``base``, ``cap < base`` or ``factor < 1`` (at the
            first ``next()``).
    """
    if not base > 0:
        raise ValueError(f"base must be > 0 seconds, got {base}")
    if not cap >= base:
        raise ValueError(f"cap must be >= base ({base} s), got {cap}")
    if not factor >= 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    ceiling = base
    while True:
        yield uniform(0.0, ceiling)
        # Stop multiplying once at the cap: no float overflow however long we are offline.
        ceiling = cap if ceiling * factor >= cap else ceiling * factor


_FINAL = frozenset(
    {
        CloseCode.VERSION_MISMATCH,  # needs a software upgrade on one side
        CloseCode.UNAUTHORIZED,  # needs a new certificate (re-join), not another try
    }
)


def is_retryable(code: CloseCode) -> bool:
    """Whether reconnecting can help after a session ended with ``code``.

    ``VERSION_MISMATCH`` and ``UNAUTHORIZED`` are final: trying again with the same
    software and certificate gives the same answer, so the dialer should stop and report.
    Every other code (overload, restarts, lost connections, protocol errors that may be
    transient corruption) is worth a retry with backoff. Transport failures (refused
    connections, timeouts, TLS errors) are the dialer's to classify.
    """
    return code not in _FINAL


def retry_delay(drawn: float, retry_after: float | None) -> float:
    """The delay before the next attempt, honouring a peer's ``retry_after``.

    The peer's ``retry_after`` is a floor and the backoff draw is added on top of it, so
    that nodes told the same ``retry_after`` by an overloaded hub do not all come back in
    the same instant.

    Args:
        drawn: seconds, the next value of ``backoff()``.
        retry_after: seconds from the peer's ``close`` (``OVERLOADED``, ``GOING_AWAY``), or
            ``None``.

    Returns:
        Seconds to wait.
    """
    if retry_after is None:
        return drawn
    return retry_after + drawn
