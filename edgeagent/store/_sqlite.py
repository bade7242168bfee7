"""The one import site of ``sqlite3`` in the agent, and the little of a database wrapper
and migration runner the store needs.

Why not sqlite-utils (which the store used until issue 16): importing it costs about 3 MiB
of RSS on every start (``python-dateutil`` with its time zone code, ``pluggy`` and
``importlib.metadata`` for its plugins, ``decimal``, ``tabulate``), and the store used two
things of it: ``Database.atomic()`` and ``Migrations``. Both are here, compatible with the
files sqlite-utils wrote: the same ``_sqlite_migrations`` table (same DDL, one row per
applied migration, ``applied_at`` as ``str(datetime.now(timezone.utc))``), the same
savepoint semantics, ``PRAGMA recursive_triggers=on`` as sqlite-utils set it. A store made
by an older agent opens unchanged, and the migrations make byte-identical schemas.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import secrets
import sqlite3
from collections.abc import Callable, Iterator

__all__ = ["Database", "Migrations", "sqlite3"]

_MIGRATIONS_TABLE_DDL = (
    'CREATE TABLE "_sqlite_migrations" (\n'
    '   "id" INTEGER PRIMARY KEY,\n'
    '   "migration_set" TEXT,\n'
    '   "name" TEXT,\n'
    '   "applied_at" TEXT\n'
    ")",
    'CREATE UNIQUE INDEX "idx__sqlite_migrations_migration_set_name"\n'
    '    ON "_sqlite_migrations" ("migration_set", "name")',
)
"""What sqlite-utils 4 creates for its migrations table, statement for statement."""


class Database:
    """A ``sqlite3`` connection with nested transactions (``atomic``).

    The connection must use the default transaction handling (``isolation_level`` "",
    no ``autocommit=``), as the store opens it.

    Args:
        conn: the open connection; closing the ``Database`` closes it.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        conn.execute("PRAGMA recursive_triggers=on;")

    def execute(self, sql: str, parameters: tuple | list | dict = ()) -> sqlite3.Cursor:
        """Run one statement.

        Raises:
            sqlite3.Error: from SQLite.
        """
        return self.conn.execute(sql, parameters)

    def table_exists(self, name: str) -> bool:
        """Whether a table called ``name`` exists."""
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    @contextlib.contextmanager
    def atomic(self) -> Iterator[Database]:
        """All or nothing: a transaction, or a savepoint inside the open one.

        On an exception the work of the block is rolled back (the open transaction stays
        open) and the exception propagates; otherwise it is released, or committed when
        this block began the transaction.

        Raises:
            sqlite3.Error: from SQLite (``BEGIN``, ``COMMIT``, the savepoint statements).
        """
        conn = self.conn
        if conn.in_transaction:
            savepoint = f"edgeagent_{secrets.token_hex(8)}"
            conn.execute(f"SAVEPOINT {savepoint}")
            try:
                yield self
            except BaseException:
                # A RAISE(ROLLBACK) or a full disk can end the whole transaction,
                # savepoint included: then there is nothing to roll back to.
                if conn.in_transaction:
                    conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                    conn.execute(f"RELEASE SAVEPOINT {savepoint}")
                raise
            conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            return
        conn.execute("BEGIN")
        try:
            yield self
        except BaseException:
            conn.rollback()
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise


@dataclasses.dataclass(frozen=True)
class Migration:
    """One registered migration: its name (the function's) and the function."""

    name: str
    fn: Callable[[Database], None]


@dataclasses.dataclass(frozen=True)
class AppliedMigration:
    """A row of ``_sqlite_migrations``: the name, and when (text, UTC)."""

    name: str
    applied_at: str


class Migrations:
    """A named, ordered set of schema migrations, each applied once, in its own transaction
    with the row that records it (as sqlite-utils' ``Migrations``).

    Args:
        name: the migration set (the ``migration_set`` column).
    """

    table = "_sqlite_migrations"

    def __init__(self, name: str) -> None:
        self.name = name
        self._migrations: list[Migration] = []

    def __call__(self) -> Callable[[Callable[[Database], None]], Callable[[Database], None]]:
        """Decorator registering a migration under its function's name.

        Raises:
            ValueError: a migration of that name is already registered.
        """

        def register(fn: Callable[[Database], None]) -> Callable[[Database], None]:
            if any(m.name == fn.__name__ for m in self._migrations):
                raise ValueError(f"migration {fn.__name__!r} is already in set {self.name!r}")
            self._migrations.append(Migration(fn.__name__, fn))
            return fn

        return register

    @property
    def migrations(self) -> tuple[Migration, ...]:
        """The registered migrations, in order."""
        return tuple(self._migrations)

    def applied(self, db: Database) -> list[AppliedMigration]:
        """The migrations of this set applied to ``db``, in the order applied (read only).

        Raises:
            sqlite3.Error: from SQLite.
        """
        if not db.table_exists(self.table):
            return []
        rows = db.execute(
            f"SELECT name, applied_at FROM {self.table} WHERE migration_set = ? ORDER BY rowid",
            (self.name,),
        ).fetchall()
        return [AppliedMigration(name, applied_at) for name, applied_at in rows]

    def apply(self, db: Database) -> list[str]:
        """Apply the pending migrations, each with its record in one transaction; a
        migration that raises is rolled back and stays pending.

        Returns:
            The names applied now.

        Raises:
            sqlite3.Error: from SQLite, or whatever a migration raised.
        """
        if not db.table_exists(self.table):
            with db.atomic():
                for statement in _MIGRATIONS_TABLE_DDL:
                    db.execute(statement)
        done = {m.name for m in self.applied(db)}
        applied = []
        for migration in self._migrations:
            if migration.name in done:
                continue
            with db.atomic():
                migration.fn(db)
                db.execute(
                    f"INSERT INTO {self.table} (migration_set, name, applied_at) VALUES (?, ?, ?)",
                    (self.name, migration.name, _now_text()),
                )
            applied.append(migration.name)
        return applied


def _now_text() -> str:
    """Now in UTC as sqlite-utils wrote ``applied_at``: ``2026-07-04 12:00:00.000000+00:00``."""
    return str(datetime.datetime.now(datetime.timezone.utc))
