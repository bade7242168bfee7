"""The SQLite ``TwinStore`` answers exactly as the reference ``MemoryTwinStore`` does, keeps
value types, survives a reopen, and drives ``EdgeTwins``."""

from __future__ import annotations

import pathlib
import random

import pytest

from edgeagent.devices import DesiredRecord, EdgeTwins, MemoryTwinStore, Reading
from edgeagent.store import Store
from protocol.devices import DesiredState, ReportedValue
from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device

NOW = 1_700_000_000.0


@pytest.fixture
def store(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    yield s
    s.close()


def _report(uid: str, prop: str, version: int, value=1.5) -> ReportedValue:
    return ReportedValue("default", f"dev-{uid}", uid, prop, value, version, NOW + version / 1000)


def _pending_key(r: ReportedValue) -> tuple:
    return (r.version, r.uid, r.property)


def test_random_operations_give_the_reference_answers(store: Store) -> None:
    rnd = random.Random(7)
    ref, sql = MemoryTwinStore(), store.twins()
    uids, props = ["a", "b", "c"], ["p", "q"]
    versions: dict[tuple[str, str], int] = {}
    for step in range(600):
        op = rnd.choice(["desired", "report", "report", "deliver", "drop", "delete", "observe"])
        uid = rnd.choice(uids)
        if op == "desired":
            record = DesiredRecord(
                uid,
                "default",
                f"dev-{uid}",
                rnd.randint(1, 50),
                {"p": rnd.random(), "s": "x"},
                received_at=NOW + step,
            )
            ref.put_desired(record)
            sql.put_desired(record)
        elif op == "report":
            latest, history = [], []
            for prop in rnd.sample(props, rnd.randint(1, 2)):
                for _ in range(rnd.randint(1, 3)):
                    versions[(uid, prop)] = versions.get((uid, prop), 0) + rnd.randint(1, 5)
                    value = rnd.choice([1, 2.5, "t", b"\x00"])
                    r = _report(uid, prop, versions[(uid, prop)], value)
                    history.append(r)
                latest.append(history[-1])
            use_history = history if rnd.random() < 0.5 else []
            assert ref.save_reports(latest, use_history, 4) == sql.save_reports(
                latest, use_history, 4
            ), step
        elif op == "deliver":
            pending = ref.pending_reported(100)
            if pending:
                r = rnd.choice(pending)
                version = r.version if rnd.random() < 0.8 else r.version - 1  # a stale ack
                ref.mark_reported_delivered(r.uid, r.property, version)
                sql.mark_reported_delivered(r.uid, r.property, version)
        elif op == "drop":
            prop = rnd.choice(props)
            up_to = versions.get((uid, prop), 0) - rnd.randint(0, 4)
            ref.drop_history(uid, prop, up_to)
            sql.drop_history(uid, prop, up_to)
        elif op == "delete" and rnd.random() < 0.2:
            ref.delete_device(uid)
            sql.delete_device(uid)
        elif op == "observe":
            record = ref.get_desired(uid)
            if record is not None:
                assert sql.get_desired(uid) == record
        for u in uids:
            assert sql.get_desired(u) == ref.get_desired(u), step
            assert sql.latest_reported(u) == ref.latest_reported(u), step
        assert sorted(sql.pending_reported(100), key=_pending_key) == sorted(
            ref.pending_reported(100), key=_pending_key
        ), step
        assert sql.pending_history(1000) == ref.pending_history(1000), step
        if step % 50 == 0:
            store.flush()


def test_limits_and_order(store: Store) -> None:
    sql = store.twins()
    sql.save_reports([_report("a", "p", 5), _report("a", "q", 2), _report("b", "p", 9)], [], 10)
    assert [r.version for r in sql.pending_reported(2)] == [2, 5]  # oldest version first
    history = [_report("b", "p", v) for v in (1, 2, 3)] + [_report("a", "p", v) for v in (7, 8)]
    sql.save_reports([], history, 10)
    assert [(r.uid, r.version) for r in sql.pending_history(3)] == [("a", 7), ("a", 8), ("b", 1)]


def test_history_is_bounded_per_property(store: Store) -> None:
    sql = store.twins()
    dropped = sql.save_reports([], [_report("a", "p", v) for v in range(1, 8)], 3)
    assert dropped == 4
    assert [r.version for r in sql.pending_history(100)] == [5, 6, 7]
    assert sql.save_reports([], [_report("a", "p", 8), _report("a", "q", 1)], 3) == 1
    assert [(r.property, r.version) for r in sql.pending_history(100)] == [
        ("p", 6),
        ("p", 7),
        ("p", 8),
        ("q", 1),
    ]


def test_values_keep_their_types_across_a_reopen(tmp_path: pathlib.Path) -> None:
    values = {"i": 2**62, "f": 0.1, "b": True, "s": "héllo", "raw": b"\x00\xff"}
    with Store.open(tmp_path / "store.db") as s:
        sql = s.twins()
        sql.put_desired(DesiredRecord("u", "ns", "d", 3, values, NOW))
        sql.save_reports(
            [ReportedValue("ns", "d", "u", k, v, 10, NOW) for k, v in values.items()], [], 5
        )
    with Store.open(tmp_path / "store.db") as s:
        sql = s.twins()
        record = sql.get_desired("u")
        assert record is not None and dict(record.properties) == values
        assert {k: type(v) for k, v in record.properties.items()} == {
            k: type(v) for k, v in values.items()
        }
        assert {p: r.value for p, r in sql.latest_reported("u").items()} == values
        assert sql.device_uids() == {"u"}
        summary = sql.summary()
        assert (summary.devices_with_desired, summary.reported, summary.reported_pending) == (
            1,
            5,
            5,
        )


def test_edge_twins_over_the_sqlite_store(tmp_path: pathlib.Path) -> None:
    with Store.open(tmp_path / "store.db") as s:
        twins = EdgeTwins(s.twins())
        twins.upsert_model(THERMOSTAT_MODEL)
        twins.upsert_device(device())
        twins.apply_desired(DesiredState("default", "thermo-1", "u-1", 4, {"setpoint": 21.0}), NOW)
        twins.desired("default", "thermo-1")
        accepted = twins.report(
            "default", "thermo-1", [Reading("temperature", 19.5)], now=NOW + 2, history=True
        )
    with Store.open(tmp_path / "store.db") as s:  # a restarted agent
        twins = EdgeTwins(s.twins())
        twins.upsert_model(THERMOSTAT_MODEL)
        twins.upsert_device(device())
        assert twins.desired("default", "thermo-1").properties == {"setpoint": 21.0}
        assert twins.pending_reports() == accepted
        assert twins.pending_history() == accepted
        twins.report_delivered(accepted[0])
        twins.history_delivered("u-1", "temperature", accepted[0].version)
        assert twins.pending_reports() == twins.pending_history() == []
        # a newer report of the property is pending again; the old ack does not cover it
        newer = twins.report("default", "thermo-1", [Reading("temperature", 20)], now=NOW + 3)
        twins.report_delivered(accepted[0])
        assert twins.pending_reports() == newer
        twins.remove_device("u-1")
        assert s.twins().device_uids() == set()


def test_the_twin_observed_columns_are_migrated_away(tmp_path: pathlib.Path) -> None:
    """A store written before m004 (``twin_desired`` with the never-sent ``observed_*``
    columns) keeps its desired state and loses the columns when a newer agent opens it."""
    import sqlite3

    path = tmp_path / "store.db"
    record = DesiredRecord("u-1", "default", "thermo-1", 4, {"p": 1.5}, NOW)
    with Store.open(path) as s:
        s.twins().put_desired(record)
    conn = sqlite3.connect(path)
    with conn:  # put the table and the migration record back as m002 left them
        conn.execute("ALTER TABLE twin_desired RENAME TO old")
        conn.execute(
            "CREATE TABLE twin_desired (uid TEXT PRIMARY KEY, namespace TEXT NOT NULL, "
            "name TEXT NOT NULL, version INTEGER NOT NULL, properties BLOB NOT NULL, "
            "received_at REAL NOT NULL, observed_version INTEGER NOT NULL DEFAULT 0, "
            "observed_at REAL NOT NULL DEFAULT 0, observed_delivered INTEGER NOT NULL DEFAULT 0)"
        )
        conn.execute(
            "INSERT INTO twin_desired SELECT uid, namespace, name, version, properties, "
            "received_at, 4, 1.0, 0 FROM old"
        )
        conn.execute("DROP TABLE old")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm004_no_twin_observed'")
    conn.close()
    with Store.open(path) as s:
        assert s.recovered_from is None  # migrated, not moved aside
        assert s.twins().get_desired("u-1") == record
        assert s.schema_version() >= 4  # m004 ran (later migrations too)
    conn = sqlite3.connect(path)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(twin_desired)")]
    conn.close()
    assert columns == ["uid", "namespace", "name", "version", "properties", "received_at"]
