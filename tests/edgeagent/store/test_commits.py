"""When twin and metrics writes are committed: background writes wait, answered reports and
sealed batches do not, ``wait_committed`` is a group commit that reports failures."""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3

import pytest

from edgeagent.errors import StoreClosedError, StoreFullError
from edgeagent.metrics import MetricsForwarder, MetricsSettings
from edgeagent.settings import StoreSettings
from edgeagent.store import Store
from protocol.devices import ReportedValue
from tests.bench.bench_metrics import typical_node_samples
from tests.disk import fill
from tests.waiting import eventually

NOW = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _committed_rows(path: pathlib.Path, table: str) -> int:
    """Rows another process would see (a second connection reads only what is committed)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


def _report(version: int) -> ReportedValue:
    return ReportedValue("default", "d", "u", "p", 1.0, version, NOW)


def test_samples_wait_for_the_background_delay_or_ride_along(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    settings = StoreSettings(commit_delay=1.0, background_commit_delay=300.0)
    path = tmp_path / "store.db"
    with Store.open(path, settings, monotonic=clock) as s:
        forwarder = MetricsForwarder(s.metrics(), MetricsSettings())  # stream committed at once
        assert s.flush_due() is None
        samples = typical_node_samples(3)
        forwarder.add(samples[0])
        assert s.flush_due() == 400.0  # a sample alone waits 5 minutes
        assert _committed_rows(path, "metrics_sample") == 0
        clock.t = 150.0
        forwarder.add(samples[1])
        assert s.flush_due() == 400.0  # the oldest background write sets the deadline
        s.twins().save_reports([_report(1)], [], 10)  # a report: within commit_delay
        assert s.flush_due() == 151.0
        s.flush()
        assert _committed_rows(path, "metrics_sample") == 2  # rode along
        assert _committed_rows(path, "twin_reported") == 1
        forwarder.add(samples[2])
        batch = forwarder.seal()
        assert batch is not None
        assert _committed_rows(path, "metrics_batch") == 1  # sealed = committed before sending
        assert s.flush_due() is None
        forwarder.acked(batch.batch_seq)
        s.twins().mark_reported_delivered("u", "p", 1)
        assert s.flush_due() == clock.t + 300.0  # acks are background writes
        assert _committed_rows(path, "metrics_batch") == 1


async def test_wait_committed_is_one_commit_for_many_waiters(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "store.db"
    with Store.open(path, StoreSettings(commit_delay=0.2)) as s:
        await s.wait_committed()  # nothing pending: returns at once
        woken: list[int] = []
        s.add_dirty_hook(lambda: woken.append(1))
        s.twins().save_reports([_report(1)], [], 10)
        waiters = [asyncio.ensure_future(s.wait_committed()) for _ in range(3)]
        s.twins().save_reports([_report(2)], [], 10)
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        assert _committed_rows(path, "twin_reported") == 0
        s.flush()  # what the agent's flusher does at flush_due()
        await asyncio.wait_for(asyncio.gather(*waiters), 5)
        assert _committed_rows(path, "twin_reported") == 1 and woken == [1]


async def test_wait_committed_brings_background_writes_forward(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "store.db", monotonic=clock) as s:
        s.twins().mark_reported_delivered("u", "p", 1)
        assert s.flush_due() == 400.0
        waiter = asyncio.ensure_future(s.wait_committed())
        await eventually(lambda: s.flush_due() == 101.0, "the waiter bringing the commit forward")
        s.flush()
        await asyncio.wait_for(waiter, 5)


async def test_wait_committed_fails_when_the_store_closes_first(tmp_path: pathlib.Path) -> None:
    s = Store.open(tmp_path / "store.db", StoreSettings(commit_delay=10))
    s.twins().save_reports([_report(1)], [], 10)
    waiter = asyncio.ensure_future(s.wait_committed())
    await asyncio.sleep(0)
    s.close()  # commits: the waiter's writes are durable
    await asyncio.wait_for(waiter, 5)
    with pytest.raises(StoreClosedError):
        await s.wait_committed()


async def test_wait_committed_reports_a_full_disk(small_fs: pathlib.Path) -> None:
    s = Store.open(small_fs / "store.db")
    try:
        s.twins().save_reports([_report(1)], [], 10)
        waiter = asyncio.ensure_future(s.wait_committed())
        await asyncio.sleep(0)
        fill(small_fs)  # the report is written, not yet committed
        with pytest.raises(StoreFullError):
            s.flush()
        with pytest.raises(StoreFullError, match="disk full"):
            await asyncio.wait_for(waiter, 5)
        assert s.twins().latest_reported("u") == {}  # rolled back: not kept, not answered
    finally:
        (small_fs / "filler").unlink(missing_ok=True)
        s.close()


def _wal_frames(path: pathlib.Path) -> list[int]:
    """Page numbers of the frames in a WAL file, in order (the SQLite WAL format)."""
    import struct

    data = path.with_name(path.name + "-wal").read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    pages, offset = [], 32
    while offset + 24 + page_size <= len(data):
        pages.append(struct.unpack(">I", data[offset : offset + 4])[0])
        offset += 24 + page_size
    return pages


def test_a_connected_minute_costs_one_commit_of_two_pages(tmp_path: pathlib.Path) -> None:
    """The SD-card budget: per batch interval one commit, writing the sample page and the
    batch page; acks (metrics and generic outbox alike) ride along with it."""
    path = tmp_path / "store.db"
    clock = Clock()
    with Store.open(path, monotonic=clock) as s:
        forwarder = MetricsForwarder(s.metrics(), MetricsSettings())
        samples = iter(typical_node_samples(40))
        for minute in range(6):
            before = len(_wal_frames(path))
            for _ in range(4):
                forwarder.add(next(samples))
            batch = forwarder.seal()
            assert batch is not None
            frames = _wal_frames(path)[before:]
            if minute:  # the first seal also takes the reservation of batch seqs
                assert len(frames) == 2, (minute, frames)
            forwarder.acked(batch.batch_seq)
            assert s.outbox_ack(10**12) == 0  # an ack of a metrics batch: no outbox rows
            assert s.flush_due() == clock.t + 300.0  # the acks wait for the next seal
            clock.t += 60
