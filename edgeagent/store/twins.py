"""Device twin state in the agent store: the records, the ``TwinStore`` interface the twin
state machine (``edgeagent.devices.EdgeTwins``) keeps its state through, and its SQLite
implementation (docs/devices.md); the in-memory one the tests use is
``edgeagent.devices.memory.MemoryTwinStore``.

Tables (migrations ``m002_device_twins``, ``m004_no_twin_observed``): ``twin_desired``
(the desired state per device), ``twin_reported`` (the latest report per property; its
``delivered = 0`` rows are the outbox of ``twin_reported`` messages, coalesced per property
by construction) and ``twin_history`` (every value of reports made with ``history``,
bounded per property). Values are msgpack, so BYTES properties stay bytes.

Every method is one transaction (a savepoint of the store's batch), so a SIGKILL leaves
each call either done or not done. When it is committed:

- ``save_reports``, ``put_desired``, ``delete_device``: within ``commit_delay`` (1 s).
  The device API answers a report only after :meth:`Store.wait_committed`, so an
  answered report survives a crash; concurrent reports share one commit.
- ``mark_reported_delivered``, ``drop_history``: background writes (within
  ``background_commit_delay``). Losing one in a crash means the hub gets the report again,
  which it discards by version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import msgpack

from protocol.devices import ReportedValue, Value

if TYPE_CHECKING:
    from edgeagent.store.db import StoreCore as Store

__all__ = ["DesiredRecord", "SQLiteTwinStore", "TwinStore", "TwinSummary"]


@dataclass(frozen=True, slots=True)
class DesiredRecord:
    """The desired state the edge holds for one device (one ``twin_desired`` row).

    Attributes:
        uid: the Device's uid.
        namespace: the Device's namespace.
        name: the Device's name.
        version: the desired version (the Device's ``metadata.generation``).
        properties: property -> wire value.
        received_at: when it was applied, s since epoch.
    """

    uid: str
    namespace: str
    name: str
    version: int
    properties: Mapping[str, Value] = field(default_factory=dict)
    received_at: float = 0.0


class TwinStore(Protocol):
    """Persistent twin state of one edge node. Every method is atomic."""

    def get_desired(self, uid: str) -> DesiredRecord | None:
        """The desired record of ``uid``, or ``None``."""
        ...

    def put_desired(self, record: DesiredRecord) -> None:
        """Insert or replace the desired record of ``record.uid``."""
        ...

    def latest_reported(self, uid: str) -> dict[str, ReportedValue]:
        """The latest report of each property of ``uid`` (delivered or not)."""
        ...

    def save_reports(
        self,
        latest: Sequence[ReportedValue],
        history: Sequence[ReportedValue],
        history_limit: int,
    ) -> int:
        """Store reports in one transaction.

        Args:
            latest: each replaces the latest report of its (uid, property) and is pending.
            history: appended to the history of their (uid, property).
            history_limit: entries kept per (uid, property); the oldest go first.

        Returns:
            How many history entries were dropped to keep the bound.
        """
        ...

    def pending_reported(self, limit: int) -> list[ReportedValue]:
        """Up to ``limit`` latest reports not yet acknowledged by the hub, oldest version first."""
        ...

    def mark_reported_delivered(self, uid: str, property: str, version: int) -> None:
        """The hub acknowledged this report; a newer report of the property stays pending."""
        ...

    def pending_history(self, limit: int) -> list[ReportedValue]:
        """Up to ``limit`` history entries, grouped by (uid, property), oldest version first."""
        ...

    def drop_history(self, uid: str, property: str, up_to_version: int) -> None:
        """Delete the history entries of (uid, property) with version ``<= up_to_version``."""
        ...

    def delete_device(self, uid: str) -> None:
        """Forget everything about ``uid`` (desired, reported, history)."""
        ...


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


@dataclasses.dataclass(frozen=True, slots=True)
class TwinSummary:
    """Counts for ``edgeagent status``.

    Attributes:
        devices_with_desired: devices holding a desired state from the hub.
        reported: properties with a latest reported value.
        reported_pending: of those, how many the hub has not acknowledged.
        history_pending: history entries not yet delivered.
    """

    devices_with_desired: int
    reported: int
    reported_pending: int
    history_pending: int


_DESIRED_COLUMNS = "uid, namespace, name, version, properties, received_at"
_REPORT_COLUMNS = "namespace, name, uid, property, value, version, timestamp"


class SQLiteTwinStore:
    """:class:`TwinStore` over the agent store. Get it with
    :meth:`Store.twins`; use it from the event loop thread, like the store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    # -- desired ----------------------------------------------------------------------

    def get_desired(self, uid: str) -> DesiredRecord | None:
        rows = self._store._read(
            f"SELECT {_DESIRED_COLUMNS} FROM twin_desired WHERE uid = ?", (uid,)
        )
        return _desired(rows[0]) if rows else None

    def put_desired(self, record: DesiredRecord) -> None:
        with self._store._write() as conn:
            conn.execute(
                f"INSERT OR REPLACE INTO twin_desired ({_DESIRED_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.uid,
                    record.namespace,
                    record.name,
                    record.version,
                    _pack(dict(record.properties)),
                    record.received_at,
                ),
            )

    # -- reported ---------------------------------------------------------------------

    def latest_reported(self, uid: str) -> dict[str, ReportedValue]:
        rows = self._store._read(
            f"SELECT {_REPORT_COLUMNS} FROM twin_reported WHERE uid = ?", (uid,)
        )
        return {r[3]: _report(r) for r in rows}

    def save_reports(
        self,
        latest: Sequence[ReportedValue],
        history: Sequence[ReportedValue],
        history_limit: int,
    ) -> int:
        dropped = 0
        with self._store._write() as conn:
            for r in latest:
                conn.execute(
                    "INSERT INTO twin_reported (uid, property, namespace, name, value, version, "
                    "timestamp, delivered) VALUES (?, ?, ?, ?, ?, ?, ?, 0) "
                    "ON CONFLICT(uid, property) DO UPDATE SET namespace = excluded.namespace, "
                    "name = excluded.name, value = excluded.value, version = excluded.version, "
                    "timestamp = excluded.timestamp, delivered = 0",
                    _row(r),
                )
            touched: dict[tuple[str, str], None] = {}
            for r in history:
                conn.execute(
                    "INSERT OR REPLACE INTO twin_history (uid, property, namespace, name, value, "
                    "version, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    _row(r),
                )
                touched[(r.uid, r.property)] = None
            for uid, prop in touched:
                # Everything at or below the (limit + 1)-th newest version goes.
                cur = conn.execute(
                    "DELETE FROM twin_history WHERE uid = ?1 AND property = ?2 AND version <= "
                    "(SELECT version FROM twin_history WHERE uid = ?1 AND property = ?2 "
                    "ORDER BY version DESC LIMIT 1 OFFSET ?3)",
                    (uid, prop, history_limit),
                )
                dropped += max(cur.rowcount, 0)
        return dropped

    def pending_reported(self, limit: int) -> list[ReportedValue]:
        rows = self._store._read(
            f"SELECT {_REPORT_COLUMNS} FROM twin_reported WHERE delivered = 0 "
            "ORDER BY version LIMIT ?",
            (limit,),
        )
        return [_report(r) for r in rows]

    def mark_reported_delivered(self, uid: str, property: str, version: int) -> None:
        with self._store._write(background=True) as conn:
            conn.execute(
                "UPDATE twin_reported SET delivered = 1 "
                "WHERE uid = ? AND property = ? AND version = ? AND delivered = 0",
                (uid, property, version),
            )

    def pending_history(self, limit: int) -> list[ReportedValue]:
        rows = self._store._read(
            f"SELECT {_REPORT_COLUMNS} FROM twin_history ORDER BY uid, property, version LIMIT ?",
            (limit,),
        )
        return [_report(r) for r in rows]

    def drop_history(self, uid: str, property: str, up_to_version: int) -> None:
        with self._store._write(background=True) as conn:
            conn.execute(
                "DELETE FROM twin_history WHERE uid = ? AND property = ? AND version <= ?",
                (uid, property, up_to_version),
            )

    def delete_device(self, uid: str) -> None:
        with self._store._write() as conn:
            for table in ("twin_desired", "twin_reported", "twin_history"):
                conn.execute(f"DELETE FROM {table} WHERE uid = ?", (uid,))

    # -- beyond the TwinStore interface -------------------------------------------------

    def device_uids(self) -> set[str]:
        """Every device uid that has twin state (to prune devices that left the node
        while the agent was down or before a deletion was committed)."""
        rows = self._store._read(
            "SELECT uid FROM twin_desired UNION SELECT uid FROM twin_reported "
            "UNION SELECT uid FROM twin_history"
        )
        return {r[0] for r in rows}

    def summary(self) -> TwinSummary:
        """Counts of what is held and what waits for the hub."""
        (row,) = self._store._read(
            "SELECT (SELECT COUNT(*) FROM twin_desired), (SELECT COUNT(*) FROM twin_reported), "
            "(SELECT COUNT(*) FROM twin_reported WHERE delivered = 0), "
            "(SELECT COUNT(*) FROM twin_history)"
        )
        return TwinSummary(*row)


def _row(r: ReportedValue) -> tuple:
    """A report as (uid, property, namespace, name, value, version, timestamp)."""
    return (r.uid, r.property, r.namespace, r.name, _pack(r.value), r.version, r.timestamp)


def _desired(row: tuple) -> DesiredRecord:
    uid, namespace, name, version, props, received = row
    return DesiredRecord(uid, namespace, name, version, _unpack(props), received)


def _report(row: tuple) -> ReportedValue:
    namespace, name, uid, prop, value, version, timestamp = row
    return ReportedValue(namespace, name, uid, prop, _unpack(value), version, timestamp)
