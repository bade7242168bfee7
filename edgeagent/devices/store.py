"""What the twin state machine keeps on disk, as an interface, with an in-memory version.

The agent's SQLite store implements ``TwinStore`` (``edgeagent/store/twins.py``,
``Store.twins()``); ``MemoryTwinStore`` is the reference implementation the tests use. Every
method is one transaction: a crash between two calls loses at most the call in flight,
and the caller has not acknowledged anything for it yet.

Tables the SQLite implementation needs (values are msgpack, so BYTES stay bytes)::

    CREATE TABLE twin_desired (
        uid TEXT PRIMARY KEY,             -- Device metadata.uid (identity)
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,         -- Device metadata.generation
        properties BLOB NOT NULL,         -- msgpack map: property -> wire value
        received_at REAL NOT NULL,        -- s since epoch
        observed_version INTEGER NOT NULL DEFAULT 0,   -- highest version a mapper fetched
        observed_at REAL NOT NULL DEFAULT 0,
        observed_delivered INTEGER NOT NULL DEFAULT 0  -- highest observed version acked
    );
    CREATE TABLE twin_reported (          -- latest per property; doubles as the outbox
        uid TEXT NOT NULL,
        property TEXT NOT NULL,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        value BLOB NOT NULL,              -- msgpack wire value
        version INTEGER NOT NULL,
        timestamp REAL NOT NULL,          -- s since epoch
        delivered INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (uid, property)
    );
    CREATE INDEX twin_reported_pending ON twin_reported (delivered) WHERE delivered = 0;
    CREATE TABLE twin_history (           -- only for reports made with history=true
        uid TEXT NOT NULL,
        property TEXT NOT NULL,
        version INTEGER NOT NULL,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        value BLOB NOT NULL,
        timestamp REAL NOT NULL,
        PRIMARY KEY (uid, property, version)
    );

``save_reports`` is one transaction: upsert ``twin_reported`` rows (``delivered = 0``),
insert ``twin_history`` rows, then delete the oldest history rows of each touched
(uid, property) beyond ``history_limit``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from protocol.devices import ReportedValue, Value


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
        observed_version: highest desired version a mapper fetched (0: none).
        observed_at: when, s since epoch.
        observed_delivered: highest observed version the hub acknowledged.
    """

    uid: str
    namespace: str
    name: str
    version: int
    properties: Mapping[str, Value] = field(default_factory=dict)
    received_at: float = 0.0
    observed_version: int = 0
    observed_at: float = 0.0
    observed_delivered: int = 0


class TwinStore(Protocol):
    """Persistent twin state of one edge node. Every method is atomic."""

    def get_desired(self, uid: str) -> DesiredRecord | None:
        """The desired record of ``uid``, or ``None``."""
        ...

    def put_desired(self, record: DesiredRecord) -> None:
        """Insert or replace the desired record of ``record.uid``."""
        ...

    def pending_observed(self, limit: int) -> list[DesiredRecord]:
        """Up to ``limit`` records whose ``observed_version > observed_delivered``."""
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


class MemoryTwinStore:
    """``TwinStore`` in dicts: the reference implementation, and what the tests use."""

    def __init__(self) -> None:
        self._desired: dict[str, DesiredRecord] = {}
        self._reported: dict[tuple[str, str], tuple[ReportedValue, bool]] = {}
        self._history: dict[tuple[str, str], list[ReportedValue]] = {}

    def get_desired(self, uid: str) -> DesiredRecord | None:
        return self._desired.get(uid)

    def put_desired(self, record: DesiredRecord) -> None:
        self._desired[record.uid] = replace(record, properties=dict(record.properties))

    def pending_observed(self, limit: int) -> list[DesiredRecord]:
        pending = [r for r in self._desired.values() if r.observed_version > r.observed_delivered]
        return pending[:limit]

    def latest_reported(self, uid: str) -> dict[str, ReportedValue]:
        return {prop: rv for (u, prop), (rv, _) in self._reported.items() if u == uid}

    def save_reports(
        self,
        latest: Sequence[ReportedValue],
        history: Sequence[ReportedValue],
        history_limit: int,
    ) -> int:
        for report in latest:
            self._reported[(report.uid, report.property)] = (report, False)
        dropped = 0
        for report in history:
            entries = self._history.setdefault((report.uid, report.property), [])
            entries.append(report)
            if len(entries) > history_limit:
                excess = len(entries) - history_limit
                del entries[:excess]
                dropped += excess
        return dropped

    def pending_reported(self, limit: int) -> list[ReportedValue]:
        pending = [rv for rv, delivered in self._reported.values() if not delivered]
        pending.sort(key=lambda rv: rv.version)
        return pending[:limit]

    def mark_reported_delivered(self, uid: str, property: str, version: int) -> None:
        current = self._reported.get((uid, property))
        if current is not None and current[0].version == version:
            self._reported[(uid, property)] = (current[0], True)

    def pending_history(self, limit: int) -> list[ReportedValue]:
        out: list[ReportedValue] = []
        for key in sorted(self._history):
            for report in self._history[key]:
                if len(out) >= limit:
                    return out
                out.append(report)
        return out

    def drop_history(self, uid: str, property: str, up_to_version: int) -> None:
        entries = self._history.get((uid, property))
        if entries is None:
            return
        entries[:] = [e for e in entries if e.version > up_to_version]
        if not entries:
            del self._history[(uid, property)]

    def delete_device(self, uid: str) -> None:
        self._desired.pop(uid, None)
        for key in [k for k in self._reported if k[0] == uid]:
            del self._reported[key]
        for key in [k for k in self._history if k[0] == uid]:
            del self._history[key]
