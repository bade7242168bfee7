"""Numbered schema migrations of the agent store.

To change the schema, append a function named ``mNNN_what`` decorated with
``@MIGRATIONS()``; never edit or reorder one that shipped. Each runs once, in its own
transaction, recorded in ``_sqlite_migrations`` (the table sqlite-utils kept, see
:mod:`edgeagent.store._sqlite`). A database that has
migrations this agent does not know (written by a newer agent) is treated like a damaged
one: moved aside, and the agent resyncs from the hub.

Tables and who owns them: ``m001`` the store itself (:mod:`edgeagent.store.store`);
``m002`` device twins (:mod:`edgeagent.store.twins`, docs/devices.md); ``m003`` the
metrics store-and-forward buffer (:mod:`edgeagent.store.metrics`, docs/metrics.md);
``m004`` removes the never-sent ``twin_observed`` state from ``m002``; ``m005`` the
dead letters of up-going messages that cannot be sent (:mod:`edgeagent.store.deadletters`). Their
DDL is written out as SQL so that it reads exactly as those documents show it.
"""

from __future__ import annotations

import re
from typing import Any

from edgeagent.store._sqlite import Migrations

__all__ = ["MIGRATIONS", "MIGRATION_SET", "migration_number"]

MIGRATION_SET = "edgeagent"
MIGRATIONS = Migrations(MIGRATION_SET)


def migration_number(name: str) -> int:
    """The number in a migration name (``m001_initial`` → 1); 0 if it has none."""
    match = re.match(r"m(\d+)_", name)
    return int(match.group(1)) if match else 0


@MIGRATIONS()
def m001_initial(db: Any) -> None:
    """Objects from the hub, last known pod status, outbox, agent state."""
    # The DDL sqlite-utils' ``Table.create`` wrote for this migration until issue 16,
    # character for character, so that old and new stores have one schema.
    db.execute(
        'CREATE TABLE "objects" (\n'
        '   "uid" TEXT PRIMARY KEY,\n'
        '   "kind" TEXT NOT NULL,\n'
        '   "namespace" TEXT NOT NULL,\n'
        '   "name" TEXT NOT NULL,\n'
        '   "resource_version" TEXT NOT NULL,\n'
        '   "body" TEXT NOT NULL\n'  # the raw API JSON
        ")"
    )
    db.execute(
        'CREATE INDEX "idx_objects_kind_namespace_name"\n'
        '    ON "objects" ("kind", "namespace", "name")'
    )
    db.execute(
        'CREATE TABLE "pod_status" (\n'
        '   "uid" TEXT PRIMARY KEY,\n'
        '   "status" TEXT NOT NULL,\n'
        '   "observed_at" REAL NOT NULL\n'
        ")"
    )
    # id: append order; seq: the wire sequence number the session gave it when sent
    db.execute(
        'CREATE TABLE "outbox" (\n'
        '   "id" INTEGER PRIMARY KEY,\n'
        '   "seq" INTEGER,\n'
        '   "kind" TEXT NOT NULL,\n'
        '   "coalesce_key" TEXT,\n'
        '   "body" TEXT NOT NULL,\n'
        '   "created_at" REAL NOT NULL\n'
        ")"
    )
    db.execute("CREATE UNIQUE INDEX outbox_seq ON outbox(seq) WHERE seq IS NOT NULL")
    # Latest-wins: at most one unsent message per coalescing key.
    db.execute(
        "CREATE UNIQUE INDEX outbox_coalesce ON outbox(coalesce_key) "
        "WHERE coalesce_key IS NOT NULL AND seq IS NULL"
    )
    db.execute('CREATE TABLE "state" (\n   "key" TEXT PRIMARY KEY,\n   "value" TEXT NOT NULL\n)')


@MIGRATIONS()
def m002_device_twins(db: Any) -> None:
    """Device twin state (docs/devices.md): desired per device, latest reported per
    property (which doubles as the outbox of ``twin_reported``), bounded history.
    Values are msgpack, so BYTES properties stay bytes."""
    db.execute(
        "CREATE TABLE twin_desired (uid TEXT PRIMARY KEY, namespace TEXT NOT NULL, "
        "name TEXT NOT NULL, version INTEGER NOT NULL, properties BLOB NOT NULL, "
        "received_at REAL NOT NULL, observed_version INTEGER NOT NULL DEFAULT 0, "
        "observed_at REAL NOT NULL DEFAULT 0, observed_delivered INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute(
        "CREATE TABLE twin_reported (uid TEXT NOT NULL, property TEXT NOT NULL, "
        "namespace TEXT NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL, "
        "version INTEGER NOT NULL, timestamp REAL NOT NULL, "
        "delivered INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (uid, property))"
    )
    db.execute(
        "CREATE INDEX twin_reported_pending ON twin_reported (delivered) WHERE delivered = 0"
    )
    db.execute(
        "CREATE TABLE twin_history (uid TEXT NOT NULL, property TEXT NOT NULL, "
        "version INTEGER NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, "
        "value BLOB NOT NULL, timestamp REAL NOT NULL, PRIMARY KEY (uid, property, version))"
    )


@MIGRATIONS()
def m003_metrics_buffer(db: Any) -> None:
    """The metrics store-and-forward buffer (docs/metrics.md): the stream identity,
    unsealed samples, sealed batches awaiting the hub's acknowledgement."""
    db.execute(
        "CREATE TABLE metrics_stream (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "stream_id INTEGER NOT NULL, next_batch_seq INTEGER NOT NULL)"
    )
    db.execute("CREATE TABLE metrics_sample (seq INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    db.execute(
        "CREATE TABLE metrics_batch (batch_seq INTEGER PRIMARY KEY, body BLOB NOT NULL, "
        "samples INTEGER NOT NULL, first_t_ms INTEGER NOT NULL, last_t_ms INTEGER NOT NULL)"
    )


@MIGRATIONS()
def m004_no_twin_observed(db: Any) -> None:
    """Drop the ``observed_*`` columns of ``twin_desired``: they fed a ``twin_observed``
    message the protocol never had (issue 14). The table is rebuilt rather than altered
    (``ALTER TABLE … DROP COLUMN`` needs SQLite 3.35; Debian 11 ships 3.34)."""
    db.execute(
        "CREATE TABLE twin_desired_new (uid TEXT PRIMARY KEY, namespace TEXT NOT NULL, "
        "name TEXT NOT NULL, version INTEGER NOT NULL, properties BLOB NOT NULL, "
        "received_at REAL NOT NULL)"
    )
    db.execute(
        "INSERT INTO twin_desired_new (uid, namespace, name, version, properties, received_at) "
        "SELECT uid, namespace, name, version, properties, received_at FROM twin_desired"
    )
    db.execute("DROP TABLE twin_desired")
    db.execute("ALTER TABLE twin_desired_new RENAME TO twin_desired")


@MIGRATIONS()
def m005_dead_letters(db: Any) -> None:
    """Up-going messages that cannot be sent (issue 15; :mod:`edgeagent.store.deadletters`,
    docs/hublink.md): the failed attempts of outbox messages still queued, and the
    dead-letter table the ones given up on move to."""
    db.execute(
        "CREATE TABLE send_failure (outbox_id INTEGER PRIMARY KEY, attempts INTEGER NOT NULL, "
        "reason TEXT NOT NULL, last_at REAL NOT NULL)"
    )
    db.execute(
        "CREATE TABLE dead_letter (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
        "body TEXT NOT NULL, size INTEGER NOT NULL, reason TEXT NOT NULL, "
        "attempts INTEGER NOT NULL, created_at REAL NOT NULL, dead_at REAL NOT NULL)"
    )
