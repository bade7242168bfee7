"""TokenBucket: burst at once, then qps per second."""

from __future__ import annotations

import asyncio

import pytest

from cloudhub.kube import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_refill_at_qps() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=4, burst=3, clock=clock)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.125  # half a token (binary fractions: exact arithmetic)
    assert not bucket.try_acquire()
    clock.now += 0.125
    assert bucket.try_acquire()
    clock.now += 100.0  # never more than the burst
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(qps=0, burst=1)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(qps=1, burst=0)


async def test_acquire_waits_for_tokens_in_order() -> None:
    bucket = TokenBucket(qps=50, burst=2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    order = []

    async def take(i: int) -> None:
        await bucket.acquire()
        order.append((i, loop.time() - started))

    await asyncio.gather(*(take(i) for i in range(7)))
    assert [i for i, _ in order] == list(range(7))
    # 2 at once, then 5 more at 50/s: at least 0.1 s in all
    assert order[1][1] < 0.05
    assert order[-1][1] >= 5 / 50 * 0.95
