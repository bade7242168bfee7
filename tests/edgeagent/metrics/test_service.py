"""The metrics sampling loop: samples into the buffer, a batch due at the batch cadence.

Intervals are shortened to tens of milliseconds; every wait is on a condition with a
generous timeout, never a bare sleep.
"""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from edgeagent.metrics import (
    MemoryMetricsStorage,
    MetricsForwarder,
    MetricsService,
    MetricsSettings,
    Sampler,
    SamplingError,
)
from protocol.metrics_codec import decode_batch

TIMEOUT = 20.0


@pytest.fixture
def settings(tmp_path: pathlib.Path) -> MetricsSettings:
    return MetricsSettings(
        sample_interval_s=0.02,
        batch_interval_s=0.1,
        max_window_s=60.0,
        state_dir=str(tmp_path),
        sys_root=str(tmp_path / "no-sys"),
    )


async def test_a_batch_is_due_after_every_batch_intervals_worth_of_samples(
    settings: MetricsSettings,
) -> None:
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    calls: list[int] = []
    two = asyncio.Event()

    def on_batch_due() -> None:
        calls.append(forwarder.backlog())
        if len(calls) >= 2:
            two.set()

    service = MetricsService(settings, Sampler(settings), forwarder, on_batch_due=on_batch_due)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(two.wait(), TIMEOUT)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    per_batch = round(settings.batch_interval_s / settings.sample_interval_s)
    assert calls[0] >= per_batch  # whole samples: due only once a batch's worth is in
    assert calls[1] >= 2 * per_batch  # nothing sealed here: the uplink's source seals
    assert forwarder.unacked() == []
    first = forwarder.seal()
    assert first is not None and decode_batch(first.body).samples  # real host samples


class BrokenHost:
    def read(self, wall_s: float):
        raise SamplingError("/proc", "gone")


async def test_unreadable_host_skips_the_sample(settings: MetricsSettings) -> None:
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    sampler = Sampler(settings, host=BrokenHost())  # type: ignore[arg-type]
    service = MetricsService(settings, sampler, forwarder)
    assert not await service.sample_once()
    assert forwarder.backlog() == 0
