"""Small agent facts (node name, hub session, the seq reservation) and the typed stores
of the device twins and the metrics buffer over the same database."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from edgeagent.store.db import RESYNC_PENDING, StoreCore, dumps

if TYPE_CHECKING:
    from edgeagent.store.metrics import SQLiteMetricsStorage
    from edgeagent.store.twins import SQLiteTwinStore

__all__ = ["StatePart"]


class StatePart(StoreCore):
    """The ``state`` table, and the twin and metrics stores (a part of
    :class:`~edgeagent.store.Store`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._twins: Any = None
        self._metrics: Any = None

    def get_state(self, key: str, default: Any = None) -> Any:
        """A small JSON value from the agent-state table, or ``default``."""
        raw = self._get_state_raw(key)
        return default if raw is None else json.loads(raw)

    def _get_state_raw(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM state WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_state(self, key: str, value: Any) -> None:
        """Set an agent-state value (batched commit; no write if unchanged)."""
        raw = dumps(value)
        if self._get_state_raw(key) == raw:
            return
        with self._write() as conn:
            conn.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, raw),
            )

    @property
    def resync_pending(self) -> bool:
        """True from the open that recreated this store empty (a damaged file moved aside)
        until :meth:`mark_resynced`: the store does not know this node's pods yet."""
        return bool(self.get_state(RESYNC_PENDING, False))

    def mark_resynced(self) -> None:
        """The hub completed a sync (``sync_done``): the store holds this node's objects."""
        if self.resync_pending:
            self.set_state(RESYNC_PENDING, False)

    # --- device twins and the metrics buffer ---------------------------------------------

    def twins(self) -> SQLiteTwinStore:
        """The device twins' ``TwinStore`` over this store (one per store)."""
        if self._twins is None:
            from edgeagent.store.twins import SQLiteTwinStore

            self._twins = SQLiteTwinStore(self)
        return self._twins

    def metrics(self) -> SQLiteMetricsStorage:
        """The metrics buffer's ``MetricsStorage`` over this store (one per store)."""
        if self._metrics is None:
            from edgeagent.store.metrics import SQLiteMetricsStorage

            self._metrics = SQLiteMetricsStorage(self)
        return self._metrics
