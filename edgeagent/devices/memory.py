"""The twin state machine's ``TwinStore`` in memory: the reference implementation, and what
the tests use (the agent's is ``edgeagent.store.twins.SQLiteTwinStore``, which also has the
tables)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from edgeagent.store.twins import DesiredRecord
from protocol.devices import ReportedValue

__all__ = ["MemoryTwinStore"]


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
