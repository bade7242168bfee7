"""Another process holding the store's write lock (an operator's ``sqlite3`` shell): writes
fail at once instead of stalling the event loop, :meth:`Store.wait_writable` waits for the
lock without blocking, and the writers are told to write again (issue 15 item 18)."""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import time

import pytest

from edgeagent.errors import StoreBusyError, StoreClosedError, StoreError
from edgeagent.settings import StoreSettings
from edgeagent.store import Store
from tests.edgeagent.store.test_commits import Clock


def _operator(path: pathlib.Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=5, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


async def test_a_write_under_another_process_lock_fails_fast_then_lands(tmp_path: pathlib.Path):
    store = Store.open(tmp_path / "store.db", StoreSettings(commit_delay=0))
    lost: list[int] = []
    store.add_lost_writes_listener(lambda: lost.append(1))
    operator = _operator(store.path)
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreBusyError) as caught:
            store.outbox_append("event", {"n": 1})
        assert time.monotonic() - t0 < 1.0  # the old 5 s busy timeout is gone
        assert isinstance(caught.value, StoreError) and "write lock" in str(caught.value)
        assert store.write_lock_lost and lost == []  # told once the lock is back
        waiting = asyncio.ensure_future(store.wait_writable())
        for _ in range(5):  # the loop runs while it waits
            await asyncio.sleep(0.05)
        assert not waiting.done()
        operator.rollback()
        await asyncio.wait_for(waiting, 5)
        assert lost == [1] and not store.write_lock_lost
        store.outbox_append("event", {"n": 2})  # the batch is open: no wait
        store.flush()
        assert [e.body["n"] for e in store.outbox_unsent()] == [2]
    finally:
        operator.close()
        store.close()


async def test_a_batch_opened_for_nothing_is_committed_soon(tmp_path: pathlib.Path):
    clock = Clock()
    store = Store.open(tmp_path / "store.db", StoreSettings(commit_delay=1), monotonic=clock)
    try:
        await store.wait_writable()
        assert store.flush_due() == 101.0  # not held for background_commit_delay
        store.twins().mark_reported_delivered("u", "p", 1)  # a background write joins it
        assert store.flush_due() == 400.0
        store.flush()
        assert store.flush_due() is None
        operator = _operator(store.path)  # the lock was released by the commit
        operator.rollback()
        operator.close()
    finally:
        store.close()


async def test_wait_writable_on_a_closed_store_raises(tmp_path: pathlib.Path):
    store = Store.open(tmp_path / "store.db")
    store.close()
    with pytest.raises(StoreClosedError):
        await store.wait_writable()
