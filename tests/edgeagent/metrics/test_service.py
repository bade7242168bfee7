"""The metrics loops against an uplink that records what it is given.

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
    SealedBatch,
)
from protocol.metrics_codec import decode_batch

TIMEOUT = 20.0


class RecordingUplink:
    """A session stand-in: online or not, and a log of the batches it was handed."""

    def __init__(self) -> None:
        self.conn: int | None = None
        self.sent: list[tuple[int, SealedBatch]] = []
        self.fail_next = False
        self.changed = asyncio.Condition()

    def connection_id(self) -> int | None:
        return self.conn

    async def send_metrics_batch(self, batch: SealedBatch) -> None:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionResetError("session went away")
        assert self.conn is not None
        async with self.changed:
            self.sent.append((self.conn, batch))
            self.changed.notify_all()

    async def wait_for(self, predicate) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), TIMEOUT)


@pytest.fixture
def settings(tmp_path: pathlib.Path) -> MetricsSettings:
    return MetricsSettings(
        sample_interval_s=0.02,
        batch_interval_s=0.1,
        max_window_s=60.0,
        state_dir=str(tmp_path),
        sys_root=str(tmp_path / "no-sys"),
    )


def make(settings: MetricsSettings, uplink: RecordingUplink):
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    service = MetricsService(settings, Sampler(settings), forwarder, uplink)
    return service, forwarder


async def test_samples_are_batched_and_resent_on_a_new_session(
    settings: MetricsSettings,
) -> None:
    uplink = RecordingUplink()
    service, forwarder = make(settings, uplink)
    task = asyncio.create_task(service.run())
    try:
        uplink.conn = 1
        await uplink.wait_for(lambda: len(uplink.sent) >= 2)
        first = uplink.sent[0][1]
        assert first.batch_seq == 1
        assert decode_batch(first.body).samples  # real host samples

        # The session drops before any ack; a new one starts: the unacked go again.
        unacked = {b.batch_seq for b in forwarder.unacked()}
        uplink.conn = 2
        service.flush_soon()
        await uplink.wait_for(lambda: {b.batch_seq for c, b in uplink.sent if c == 2} >= unacked)
        resent = [b for c, b in uplink.sent if c == 2 and b.batch_seq in unacked]
        originals = {b.batch_seq: b.body for c, b in uplink.sent if c == 1}
        assert all(originals[b.batch_seq] == b.body for b in resent)  # same bytes
        seqs = [b.batch_seq for c, b in uplink.sent if c == 2]
        assert seqs == sorted(seqs)  # oldest first

        service.batch_acked(max(seqs))
        assert all(b.batch_seq > max(seqs) for b in forwarder.unacked())
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_offline_keeps_samples_and_a_failed_send_is_retried(
    settings: MetricsSettings,
) -> None:
    uplink = RecordingUplink()
    service, forwarder = make(settings, uplink)
    for _ in range(3):
        assert await service.sample_once()
    assert await service.flush() == 0  # offline: nothing sealed
    assert forwarder.backlog() == 3 and forwarder.unacked() == []

    uplink.conn = 7
    uplink.fail_next = True
    assert await service.flush() == 0  # the session refused it: kept for the next flush
    (kept,) = forwarder.unacked()
    assert await service.flush() == 1
    assert uplink.sent == [(7, kept)]
    assert await service.flush() == 0  # already sent on this session: not again
    service.batch_acked(kept.batch_seq)
    assert forwarder.unacked() == []


class BrokenHost:
    def read(self, wall_s: float):
        raise SamplingError("/proc", "gone")


async def test_unreadable_host_skips_the_sample(settings: MetricsSettings) -> None:
    uplink = RecordingUplink()
    forwarder = MetricsForwarder(MemoryMetricsStorage(), settings)
    sampler = Sampler(settings, host=BrokenHost())  # type: ignore[arg-type]
    service = MetricsService(settings, sampler, forwarder, uplink)
    assert not await service.sample_once()
    assert forwarder.backlog() == 0
