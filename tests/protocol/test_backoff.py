"""Backoff: full jitter within a growing, capped ceiling; retry decisions."""

from __future__ import annotations

import itertools
import random

import pytest

from protocol import CloseCode, backoff, is_retryable, retry_delay


def highest(a: float, b: float) -> float:
    return b


def test_ceilings_double_from_base_to_cap() -> None:
    delays = list(itertools.islice(backoff(uniform=highest), 9))
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_each_delay_is_drawn_from_zero_to_its_ceiling() -> None:
    calls = []

    def record(a: float, b: float) -> float:
        calls.append((a, b))
        return (a + b) / 2

    delays = list(itertools.islice(backoff(uniform=record, base=0.5, cap=3.0), 5))
    assert calls == [(0.0, 0.5), (0.0, 1.0), (0.0, 2.0), (0.0, 3.0), (0.0, 3.0)]
    assert delays == [0.25, 0.5, 1.0, 1.5, 1.5]


def test_with_a_real_draw_delays_stay_in_bounds_and_spread() -> None:
    rng = random.Random(7)
    delays = list(itertools.islice(backoff(uniform=rng.uniform), 200))
    assert all(0.0 <= d <= 60.0 for d in delays)
    assert len({round(d, 3) for d in delays[10:]}) > 150  # jittered, not lock-step


def test_a_thousand_attempts_do_not_overflow() -> None:
    last = list(itertools.islice(backoff(uniform=highest, factor=10.0), 1000))[-1]
    assert last == 60.0


@pytest.mark.parametrize("kwargs", [{"base": 0.0}, {"base": 5.0, "cap": 1.0}, {"factor": 0.5}])
def test_bad_parameters_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        next(backoff(uniform=highest, **kwargs))


def test_only_version_mismatch_and_unauthorized_are_final() -> None:
    final = {code for code in CloseCode if not is_retryable(code)}
    assert final == {CloseCode.VERSION_MISMATCH, CloseCode.UNAUTHORIZED}


def test_retry_after_is_a_floor_with_the_jitter_on_top() -> None:
    assert retry_delay(3.0, None) == 3.0
    assert retry_delay(3.0, 30.0) == 33.0
