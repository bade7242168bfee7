"""The agent store: objects, outbox, sequence numbers, batching, damage and full disks."""

from __future__ import annotations

import logging
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

from edgeagent.errors import StoreClosedError, StoreError, StoreFullError, StoreLockedError
from edgeagent.settings import StoreSettings
from edgeagent.store import ObjectChange, Store
from tests.disk import fill
from tests.edgeagent.conftest import Ref


def _pod(uid: str = "u1", name: str = "p") -> tuple[Ref, dict]:
    return Ref("Pod", "default", name, uid), {"metadata": {"name": name, "uid": uid}}


@pytest.fixture
def store(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    yield s
    s.close()


def test_objects_inventory_and_listeners(store: Store):
    changes: list[ObjectChange] = []
    remove = store.add_listener(changes.append)
    ref, body = _pod()
    assert store.apply_upsert(ref, "5", body) is True
    assert store.apply_upsert(ref, "5", body) is False  # same version and body: no write
    assert store.inventory() == {"u1": "5"}
    cm = Ref("ConfigMap", "default", "cfg", "c1")
    store.apply_upsert(cm, "7", {"data": {"k": "v"}})
    assert store.find_object("ConfigMap", "default", "cfg").body == {"data": {"k": "v"}}
    assert [o.uid for o in store.list_objects("Pod")] == ["u1"]
    assert store.apply_delete("u1") is True
    assert store.apply_delete("u1") is False
    assert store.get_object("u1") is None
    assert [(c.op, c.uid, c.resource_version) for c in changes] == [
        ("upsert", "u1", "5"),
        ("upsert", "c1", "7"),
        ("delete", "u1", "5"),
    ]
    remove()
    store.apply_upsert(ref, "6", body)
    assert len(changes) == 3


def test_outbox_send_ack_and_latest_wins(store: Store):
    ref, _ = _pod()
    store.record_pod_status(ref, {"phase": "Pending"}, 1.0)
    e1 = store.outbox_append("event", {"reason": "Started"})
    s2 = store.record_pod_status(ref, {"phase": "Running"}, 2.0)  # replaces the unsent one
    unsent = store.outbox_unsent()
    assert [(e.id, e.kind, e.seq) for e in unsent] == [
        (e1, "event", None),
        (s2, "pod_status", None),
    ]
    assert unsent[1].body == {
        "ref": {"kind": "Pod", "namespace": "default", "name": "p", "uid": "u1"},
        "status": {"phase": "Running"},
        "observed_at": 2.0,
    }
    assert store.pod_status("u1") == {"phase": "Running"}
    # the uplink sends them: the session numbers them from next_seq()
    first = store.next_seq()
    store.outbox_mark_sent(e1, first)
    store.outbox_mark_sent(s2, first + 1)
    assert store.next_seq() == first + 2
    with pytest.raises(StoreError, match="already sent"):
        store.outbox_mark_sent(s2, first + 5)
    # a newer status while the sent one is unacknowledged: both kept, the new one unsent
    s3 = store.record_pod_status(ref, {"phase": "Failed"}, 3.0)
    assert [(e.seq, e.kind) for e in store.outbox_sent()] == [
        (first, "event"),
        (first + 1, "pod_status"),
    ]
    assert [e.id for e in store.outbox_unsent()] == [s3]
    assert store.outbox_depth() == 3
    assert store.outbox_ack(first) == 1
    assert [e.seq for e in store.outbox_pending()] == [first + 1, None]
    assert store.outbox_ack(first + 100) == 1  # cumulative; unsent ones stay
    assert [e.id for e in store.outbox_pending()] == [s3]
    with pytest.raises(StoreError, match="not above the seqs used before"):
        store.outbox_mark_sent(s3, first)  # seqs only go up


def test_seq_survives_reopen_and_advance(tmp_path: pathlib.Path):
    path = tmp_path / "store.db"
    s = Store.open(path)
    entry = s.outbox_append("event", {"n": 1})
    first = s.next_seq()
    s.outbox_mark_sent(entry, first)
    s.close()
    again = Store.open(path)
    try:
        assert again.next_seq() > first
        assert [(e.seq, e.body["n"]) for e in again.outbox_sent()] == [(first, 1)]
        again.advance_seq(again.next_seq() + 10_000)  # the hub saw higher seqs
        assert again.next_seq() > first + 10_000
    finally:
        again.close()


def test_fresh_store_starts_seq_from_the_clock(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "a.db", wall_clock=lambda: 1_700_000_000.0)
    assert s.next_seq() == 1_700_000_000 * 1_000_000
    s.close()


def test_writes_are_batched_until_flush(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db", StoreSettings(commit_delay=1.0), monotonic=lambda: 100.0)
    try:
        assert s.flush_due() is None
        ref, _ = _pod()
        s.record_pod_status(ref, {"phase": "Running"}, 1.0)
        assert s.flush_due() == 101.0
        reader = sqlite3.connect(tmp_path / "store.db")
        assert reader.execute("SELECT COUNT(*) FROM pod_status").fetchone()[0] == 0
        s.flush()
        assert s.flush_due() is None
        assert reader.execute("SELECT COUNT(*) FROM pod_status").fetchone()[0] == 1
        reader.close()
    finally:
        s.close()


def test_state_and_readonly_open(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    s.set_state("hub.session", {"state": "connected", "transport": "quic"})
    s.close()
    ro = Store.open_readonly(tmp_path / "store.db")
    try:
        assert ro.get_state("hub.session")["transport"] == "quic"
        with pytest.raises(StoreClosedError):
            ro.set_state("x", 1)
    finally:
        ro.close()
    with pytest.raises(Exception, match="no store"):
        Store.open_readonly(tmp_path / "missing.db")


def test_second_agent_is_refused(tmp_path: pathlib.Path, store: Store):
    with pytest.raises(StoreLockedError):
        Store.open(tmp_path / "store.db")


def test_corrupted_file_is_moved_aside(tmp_path: pathlib.Path, caplog):
    path = tmp_path / "store.db"
    s = Store.open(path)
    s.apply_upsert(*_pod()[:1], "1", {"x": 1})
    s.close()
    with open(path, "r+b") as f:  # trash the header and the first pages
        f.write(b"\x00garbage" * 512)
    with caplog.at_level(logging.ERROR):
        fresh = Store.open(path)
    try:
        assert fresh.recovered_from is not None and fresh.recovered_from.exists()
        assert fresh.inventory() == {}
        assert "resynced from the hub" in caplog.text and str(fresh.recovered_from) in caplog.text
        fresh.outbox_append("event", {})
    finally:
        fresh.close()


def test_store_from_a_newer_agent_is_moved_aside(tmp_path: pathlib.Path):
    path = tmp_path / "store.db"
    Store.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
        "VALUES ('edgeagent', 'm999_future', 'x')"
    )
    conn.commit()
    conn.close()
    with Store.open(tmp_path / "fresh.db") as fresh:
        current = fresh.schema_version()
    s = Store.open(path)
    try:
        assert s.recovered_from is not None
        assert s.schema_version() == current  # a fresh store of this agent's schema
    finally:
        s.close()


def test_numpy_is_kept_out_of_the_agent():
    code = (
        "import sys; import edgeagent.store; "
        "print('numpy' in sys.modules, 'pandas' in sys.modules); "
        "import importlib.util; print(importlib.util.find_spec('numpy') is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[3])},
        check=True,
    ).stdout.split()
    assert out[:2] == ["False", "False"]
    # and the mask is lifted: numpy stays importable for anyone who wants it
    if out[2] == "True":
        subprocess.run(
            [sys.executable, "-c", "import edgeagent.store, numpy"],
            check=True,
            env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[3])},
        )


def test_full_disk_gives_a_clear_error_and_recovers(small_fs: pathlib.Path):
    s = Store.open(small_fs / "store.db")
    lost: list[int] = []
    s.add_lost_writes_listener(lambda: lost.append(1))
    ref, body = _pod()
    s.apply_upsert(ref, "1", body)
    s.record_pod_status(ref, {"phase": "Running"}, 1.0)
    s.flush()
    filler = fill(small_fs)
    with pytest.raises(StoreFullError, match="disk full"):
        for i in range(100):
            s.record_pod_status(ref, {"phase": "Running", "pad": "y" * 20_000, "i": i}, 2.0)
        s.flush()
    assert lost, "writers are told their batch was lost"
    assert s.pod_status("u1") == {"phase": "Running"}  # the last committed state
    with pytest.raises(StoreFullError):
        s.apply_upsert(Ref("Pod", "default", "q", "u2"), "1", {"pad": "z" * 400_000})
    assert s.get_object("u2") is None
    filler.unlink()
    s.record_pod_status(ref, {"phase": "Failed"}, 3.0)
    s.flush()
    s.close()
    again = Store.open(small_fs / "store.db")
    try:
        assert again.pod_status("u1") == {"phase": "Failed"}
        assert len(again.outbox_unsent()) == 1  # the status of the last commit
    finally:
        again.close()
