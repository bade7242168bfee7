"""The store gives space back after an offline backlog drains (issue 15 item 18), measured
on an SD-card-like budget: a 16 MiB tmpfs."""

from __future__ import annotations

import os
import pathlib
import sqlite3
import time

import pytest

from edgeagent.settings import StoreSettings
from edgeagent.store import Store

BACKLOG = 1000
"""Events queued while offline, ~2 KiB each (one 4 KiB page each): a 4 MiB file, and a
WAL at its high-water mark."""


def _size(path: pathlib.Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _files(db: pathlib.Path) -> tuple[int, int]:
    return _size(db), _size(db.with_name(db.name + "-wal"))


def _used(directory: pathlib.Path) -> int:
    st = os.statvfs(directory)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _backlog_drained(store: Store) -> None:
    """Queue :data:`BACKLOG` events, send them all and have the hub acknowledge them."""
    for i in range(BACKLOG):
        store.outbox_append("event", {"n": i, "message": f"{i:06d}" * 340})
        if i % 200 == 199:
            store.flush()
    store.flush()
    top = 0
    for entry in store.outbox_unsent():
        top = store.next_seq()
        store.outbox_mark_sent(entry.id, top)
    store.flush()
    assert store.outbox_ack(top) == BACKLOG
    store.flush()
    assert store.outbox_depth() == 0


@pytest.mark.parametrize("small_fs", ["16m"], indirect=True)
def test_a_drained_backlog_is_given_back_to_the_file_system(small_fs: pathlib.Path):
    path = small_fs / "store.db"
    store = Store.open(path, StoreSettings(commit_delay=0))
    try:
        empty_db, _ = _files(path)
        _backlog_drained(store)
        peak_db, peak_wal = _files(path)
        used_before = _used(small_fs)
        assert peak_db > 3 * 1024 * 1024, "the backlog did not grow the file"

        wall, cpu = time.perf_counter(), time.process_time()
        given = store.reclaim(force=True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu

        db, wal = _files(path)
        assert given >= peak_db // 2
        assert db <= empty_db + 256 * 1024, f"{db} bytes left of {peak_db}"
        assert wal <= store.settings.journal_size_limit, f"the WAL stayed at {wal} bytes"
        assert _used(small_fs) < used_before - 3 * 1024 * 1024
        assert store.reclaim(force=True) == 0  # nothing more to give
        store.outbox_append("event", {"n": "after"})  # still a working store
        store.flush()
        assert [e.body["n"] for e in store.outbox_unsent()] == ["after"]
        print(
            f"\nreclaim: db {peak_db} -> {db} B, wal {peak_wal} -> {wal} B, "
            f"tmpfs used {used_before} -> {_used(small_fs)} B; "
            f"{wall * 1000:.1f} ms wall, {cpu * 1000:.1f} ms CPU"
        )
    finally:
        store.close()


def test_reclaim_waits_for_the_batch_and_below_the_threshold_does_nothing(
    tmp_path: pathlib.Path,
):
    store = Store.open(tmp_path / "store.db", StoreSettings(commit_delay=0))
    try:
        _backlog_drained(store)
        store.outbox_append("event", {"n": "open batch"})
        assert store.reclaim(force=True) == 0  # a batch is open: not now
        store.flush()
        assert store.reclaim() > 0  # the first look is not rate-limited
        for i in range(20):  # a few free pages, far below the fraction
            store.outbox_append("event", {"n": i})
        store.flush()
        store.outbox_ack(store.next_seq())
        store.flush()
        assert store.reclaim(force=True) == 0
    finally:
        store.close()


def test_reclaim_skips_while_another_process_holds_the_lock(tmp_path: pathlib.Path):
    path = tmp_path / "store.db"
    store = Store.open(path, StoreSettings(commit_delay=0))
    operator = sqlite3.connect(str(path), timeout=5)
    try:
        _backlog_drained(store)
        operator.execute("BEGIN IMMEDIATE")
        assert store.reclaim(force=True) == 0  # no wait, no error
        operator.rollback()
        assert store.reclaim(force=True) > 0
    finally:
        operator.close()
        store.close()


def test_a_store_from_before_is_rebuilt_once_to_give_space_back(tmp_path: pathlib.Path):
    path = tmp_path / "store.db"
    Store.open(path).close()
    old = sqlite3.connect(str(path))  # as the agent before this change made it
    old.execute("PRAGMA auto_vacuum = NONE")
    old.execute("VACUUM")
    assert old.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    old.close()

    store = Store.open(path, StoreSettings(commit_delay=0))
    try:
        check = sqlite3.connect(str(path))
        assert check.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
        assert check.execute("PRAGMA journal_size_limit").fetchone()[0] == -1  # per connection
        check.close()
        assert store._read("PRAGMA journal_size_limit")[0][0] == 1 << 20
        _backlog_drained(store)
        assert store.reclaim(force=True) > 0
    finally:
        store.close()
