"""The durable copy of the embedded API's objects: one SQLite file in WAL mode.

The in-memory store (:mod:`cloudhub.standalone.store`) is the copy requests read;
this module only loads it at start and commits batches of changes. Its methods
block (SQLite has no asyncio interface): the store calls them from its own
single writer thread, never from the event loop.

Schema (``state.db``)::

    objects(resource TEXT, namespace TEXT, name TEXT, rv INTEGER, data BLOB,
            PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID
    meta(key TEXT PRIMARY KEY, value TEXT)   -- 'revision', 'schema'

``resource`` is :attr:`ResourceType.storage_key` (``pods``, ``apps/deployments``,
``devices.kubeedge.io/devices``), ``data`` the object's JSON as served.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import sqlite3
from collections.abc import Iterator, Sequence

from cloudhub.standalone.errors import StorageError

__all__ = ["MemoryBackend", "Row", "SQLiteBackend", "StorageBackend"]

SCHEMA_VERSION = "1"
#: How long a commit waits for a lock another process holds on the file (seconds);
#: past it the commit fails and its writers get an error, nothing is kept.
BUSY_TIMEOUT_S = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One object as stored: ``data`` is None for a deletion in a commit batch."""

    resource: str
    namespace: str
    name: str
    rv: int
    data: bytes | None


class StorageBackend:
    """Interface of a durable store. All methods block.

    Attributes:
        blocking: True when calls do I/O and must run off the event loop.
    """

    blocking = True

    def load(self) -> tuple[int, Iterator[Row]]:
        """The last committed revision and every stored object."""
        raise NotImplementedError

    def commit(self, rows: Sequence[Row], revision: int) -> None:
        """Write ``rows`` (upserts, or deletions where ``data`` is None) and
        ``revision`` in one transaction; return only once it is durable.

        Raises:
            StorageError: The transaction failed and nothing of it was kept.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release the store; safe to call twice."""


class MemoryBackend(StorageBackend):
    """Keeps nothing: the server's objects live only as long as the process."""

    blocking = False

    def load(self) -> tuple[int, Iterator[Row]]:
        return 0, iter(())

    def commit(self, rows: Sequence[Row], revision: int) -> None:
        return None


class SQLiteBackend(StorageBackend):
    """Objects in one SQLite file in WAL mode.

    Args:
        path: The database file (created with its directory when missing).
        synchronous_full: ``True`` for ``PRAGMA synchronous=FULL`` (each commit
            fsyncs the WAL: survives power loss), ``False`` for ``NORMAL``
            (survives a process crash).

    Raises:
        StorageError: The file cannot be opened or is not our schema.
    """

    def __init__(self, path: pathlib.Path, *, synchronous_full: bool = True) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # The connection is used by one writer thread at a time; the store
            # serialises every call, so sharing it across threads is safe.
            self._db = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if synchronous_full else 'NORMAL'}")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS objects (resource TEXT NOT NULL, namespace TEXT NOT"
                " NULL, name TEXT NOT NULL, rv INTEGER NOT NULL, data BLOB NOT NULL,"
                " PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            found = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if found is None:
                self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            elif found[0] != SCHEMA_VERSION:
                raise StorageError(
                    f"{path}: schema version {found[0]!r}, this server reads {SCHEMA_VERSION!r}"
                )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        except OSError as exc:  # the data directory cannot be made
            raise StorageError(f"cannot create {path.parent}: {exc.strerror or exc}") from exc

    def load(self) -> tuple[int, Iterator[Row]]:
        try:
            found = self._db.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
            revision = int(found[0]) if found else 0
            rows = self._db.execute(
                "SELECT resource, namespace, name, rv, data FROM objects"
            ).fetchall()
        except (sqlite3.Error, ValueError) as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from exc
        top = max((r[3] for r in rows), default=0)
        return max(revision, top), (Row(*r) for r in rows)

    def commit(self, rows: Sequence[Row], revision: int) -> None:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                deletes = [(r.resource, r.namespace, r.name) for r in rows if r.data is None]
                upserts = [
                    (r.resource, r.namespace, r.name, r.rv, r.data)
                    for r in rows
                    if r.data is not None
                ]
                # Rows of one batch are applied in order: a delete followed by a
                # re-create of the same name must leave the new object.
                if deletes and upserts:
                    for r in rows:
                        if r.data is None:
                            db.execute(
                                "DELETE FROM objects WHERE resource=? AND namespace=? AND name=?",
                                (r.resource, r.namespace, r.name),
                            )
                        else:
                            db.execute(
                                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?)",
                                (r.resource, r.namespace, r.name, r.rv, r.data),
                            )
                else:
                    if deletes:
                        db.executemany(
                            "DELETE FROM objects WHERE resource=? AND namespace=? AND name=?",
                            deletes,
                        )
                    if upserts:
                        db.executemany(
                            "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?)", upserts
                        )
                db.execute("INSERT OR REPLACE INTO meta VALUES ('revision', ?)", (str(revision),))
                db.execute("COMMIT")
            except BaseException:
                # SQLite rolls back by itself on some errors (a full disk, an I/O
                # error): then ROLLBACK fails, and its error would hide the cause.
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"commit to {self.path} failed: {exc}") from exc

    def close(self) -> None:
        try:
            self._db.close()
        except sqlite3.Error as exc:
            raise StorageError(f"closing {self.path} failed: {exc}") from exc
