"""The store's own database wrapper and migration runner (edgeagent/store/_sqlite.py),
which replaced sqlite-utils (issue 16): the same files, the same transaction rules."""

from __future__ import annotations

import pathlib
import sqlite3

import pytest

from edgeagent.store import Store
from edgeagent.store._sqlite import Database, Migration, Migrations

# What sqlite-utils 4.2 wrote for the migrations table and m001 (sqlite_master.sql, taken
# from a store made before issue 16): a new store must have exactly these.
SQLITE_UTILS_DDL = {
    "_sqlite_migrations": 'CREATE TABLE "_sqlite_migrations" (\n   "id" INTEGER PRIMARY KEY,\n'
    '   "migration_set" TEXT,\n   "name" TEXT,\n   "applied_at" TEXT\n)',
    "idx__sqlite_migrations_migration_set_name": 'CREATE UNIQUE INDEX "idx__sqlite_migrations_'
    'migration_set_name"\n    ON "_sqlite_migrations" ("migration_set", "name")',
    "objects": 'CREATE TABLE "objects" (\n   "uid" TEXT PRIMARY KEY,\n   "kind" TEXT NOT NULL,\n'
    '   "namespace" TEXT NOT NULL,\n   "name" TEXT NOT NULL,\n'
    '   "resource_version" TEXT NOT NULL,\n   "body" TEXT NOT NULL\n)',
    "idx_objects_kind_namespace_name": 'CREATE INDEX "idx_objects_kind_namespace_name"\n'
    '    ON "objects" ("kind", "namespace", "name")',
    "pod_status": 'CREATE TABLE "pod_status" (\n   "uid" TEXT PRIMARY KEY,\n'
    '   "status" TEXT NOT NULL,\n   "observed_at" REAL NOT NULL\n)',
    "outbox": 'CREATE TABLE "outbox" (\n   "id" INTEGER PRIMARY KEY,\n   "seq" INTEGER,\n'
    '   "kind" TEXT NOT NULL,\n   "coalesce_key" TEXT,\n   "body" TEXT NOT NULL,\n'
    '   "created_at" REAL NOT NULL\n)',
    "state": 'CREATE TABLE "state" (\n   "key" TEXT PRIMARY KEY,\n   "value" TEXT NOT NULL\n)',
}


def _db(tmp_path: pathlib.Path) -> Database:
    return Database(sqlite3.connect(tmp_path / "t.db"))


def test_a_new_store_has_the_schema_sqlite_utils_made(tmp_path: pathlib.Path) -> None:
    Store.open(tmp_path / "store.db").close()
    conn = sqlite3.connect(tmp_path / "store.db")
    try:
        sql = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
        rows = conn.execute("SELECT id, migration_set, name, applied_at FROM _sqlite_migrations")
        applied = rows.fetchall()
    finally:
        conn.close()
    assert {name: sql[name] for name in SQLITE_UTILS_DDL} == SQLITE_UTILS_DDL
    assert [(i, s, n) for i, s, n, _ in applied][:1] == [(1, "edgeagent", "m001_initial")]
    assert all(at.endswith("+00:00") and at[10] == " " for *_, at in applied)  # str(UTC now)


def test_a_failing_migration_is_rolled_back_and_stays_pending(tmp_path: pathlib.Path) -> None:
    db = _db(tmp_path)
    migrations = Migrations("test")

    @migrations()
    def m001_one(db: Database) -> None:
        db.execute("CREATE TABLE one (x INTEGER)")

    @migrations()
    def m002_broken(db: Database) -> None:
        db.execute("CREATE TABLE two (x INTEGER)")
        raise RuntimeError("half done")

    with pytest.raises(RuntimeError, match="half done"):
        migrations.apply(db)
    assert [m.name for m in migrations.applied(db)] == ["m001_one"]
    assert db.table_exists("one") and not db.table_exists("two")
    fixed = Migration("m002_broken", lambda db: db.execute("CREATE TABLE two (x INTEGER)"))
    migrations._migrations[1] = fixed
    assert migrations.apply(db) == ["m002_broken"]  # applied once fixed, m001 not again
    assert migrations.apply(db) == []


def test_a_migration_name_registered_twice_is_refused() -> None:
    migrations = Migrations("test")

    def m001_x(db: Database) -> None:
        pass

    migrations()(m001_x)
    with pytest.raises(ValueError, match="m001_x"):
        migrations()(m001_x)


def test_applied_on_a_database_without_the_table_is_empty(tmp_path: pathlib.Path) -> None:
    assert Migrations("test").applied(_db(tmp_path)) == []


def test_atomic_inside_a_transaction_undoes_only_its_block(tmp_path: pathlib.Path) -> None:
    db = _db(tmp_path)
    db.execute("CREATE TABLE t (x INTEGER)")
    db.execute("BEGIN")
    db.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError), db.atomic():
        db.execute("INSERT INTO t VALUES (2)")
        raise sqlite3.IntegrityError("refused")
    assert db.conn.in_transaction  # the outer transaction goes on
    with db.atomic():
        db.execute("INSERT INTO t VALUES (4)")
    db.conn.commit()
    assert [x for (x,) in db.execute("SELECT x FROM t ORDER BY x")] == [1, 4]


def test_atomic_alone_commits_or_rolls_back(tmp_path: pathlib.Path) -> None:
    db = _db(tmp_path)
    db.execute("CREATE TABLE t (x INTEGER)")
    with db.atomic():
        db.execute("INSERT INTO t VALUES (1)")
    assert not db.conn.in_transaction
    with pytest.raises(sqlite3.OperationalError), db.atomic():
        db.execute("INSERT INTO t VALUES (2)")
        db.execute("INSERT INTO nowhere VALUES (3)")
    assert not db.conn.in_transaction
    assert [x for (x,) in db.execute("SELECT x FROM t")] == [1]


def test_a_damaged_file_read_only_is_a_store_error_not_sqlite3s(tmp_path: pathlib.Path) -> None:
    """A reader (``edgeagent status``, the tests) that opens the store while it is damaged gets
    the store's own error, as the agent's own opening does before it moves the file aside."""
    from edgeagent.errors import StoreError

    path = tmp_path / "store.db"
    Store.open(path).close()
    with open(path, "r+b") as f:
        f.write(b"\x00garbage" * 512)
    with pytest.raises(StoreError):
        store = Store.open_readonly(path)
        try:
            store.schema_version()
        finally:
            store.close()
