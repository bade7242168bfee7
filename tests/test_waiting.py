"""The one polling helper: returns the first truthy value of a sync or async check, and
fails the test naming the condition (and what was seen last) at its deadline."""

from __future__ import annotations

import asyncio

import pytest

from tests.waiting import eventually, eventually_sync


async def test_returns_the_first_truthy_value_of_a_sync_or_async_check() -> None:
    calls: list[int] = []

    def sync_check() -> int | None:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else None

    assert await eventually(sync_check, "three calls", 5) == 3

    done = asyncio.Event()
    asyncio.get_running_loop().call_soon(done.set)

    async def async_check() -> str | None:
        return "set" if done.is_set() else None

    assert await eventually(async_check, "the event set", 5) == "set"


async def test_a_condition_that_never_holds_fails_naming_it_and_the_last_state() -> None:
    seen = {"count": 0}

    def never() -> bool:
        seen["count"] += 1
        return False

    with pytest.raises(pytest.fail.Exception) as info:
        await eventually(never, "the impossible", 0.1, state=lambda: seen["count"])
    message = str(info.value)
    assert "timed out after 0.1 s waiting for the impossible; last seen: " in message
    assert int(message.rsplit(" ", 1)[1]) == seen["count"] >= 2  # polled, then gave up


async def test_a_fixed_interval_samples_at_that_rate() -> None:
    loop = asyncio.get_running_loop()
    times: list[float] = []

    def sampled() -> bool:
        times.append(loop.time())
        return len(times) == 6

    await eventually(sampled, "six samples", 5, interval=0.01)
    # five 10 ms gaps; backing off (20, 40, 80, 160, 250 ms) would take 0.55 s
    assert times[-1] - times[0] < 0.4


def test_the_sync_variant_polls_without_a_loop() -> None:
    calls: list[int] = []
    assert eventually_sync(lambda: calls.append(1) or len(calls) >= 2, "two calls", 5) is True
    with pytest.raises(pytest.fail.Exception, match="waiting for nothing"):
        eventually_sync(lambda: 0, "nothing", 0.05)
