"""Numbered schema migrations of the agent store.

To change the schema, append a function named ``mNNN_what`` decorated with
``@MIGRATIONS()``; never edit or reorder one that shipped. Each runs once, in its own
transaction, recorded by sqlite-utils in ``_sqlite_migrations``. A database that has
migrations this agent does not know (written by a newer agent) is treated like a damaged
one: moved aside, and the agent resyncs from the hub.

Later issues add tables here (device twins, the metrics buffer), e.g.::

    @MIGRATIONS()
    def m002_device_twins(db):
        db["twins"].create({"uid": str, "property": str, ...}, pk=("uid", "property"))
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
    db["objects"].create(
        {
            "uid": str,
            "kind": str,
            "namespace": str,
            "name": str,
            "resource_version": str,
            "body": str,  # the raw API JSON
        },
        pk="uid",
        not_null={"kind", "namespace", "name", "resource_version", "body"},
    )
    db["objects"].create_index(["kind", "namespace", "name"])
    db["pod_status"].create(
        {"uid": str, "status": str, "observed_at": float},
        pk="uid",
        not_null={"status", "observed_at"},
    )
    # id: append order; seq: the wire sequence number the session gave it when sent
    db["outbox"].create(
        {
            "id": int,
            "seq": int,
            "kind": str,
            "coalesce_key": str,
            "body": str,
            "created_at": float,
        },
        pk="id",
        not_null={"kind", "body", "created_at"},
    )
    db.execute("CREATE UNIQUE INDEX outbox_seq ON outbox(seq) WHERE seq IS NOT NULL")
    # Latest-wins: at most one unsent message per coalescing key.
    db.execute(
        "CREATE UNIQUE INDEX outbox_coalesce ON outbox(coalesce_key) "
        "WHERE coalesce_key IS NOT NULL AND seq IS NULL"
    )
    db["state"].create({"key": str, "value": str}, pk="key", not_null={"value"})
