"""Small agent facts (node name, hub session, the seq reservation) and the typed stores
of the device twins and the metrics buffer over the same database."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgeagent.store.db import StoreCore, dumps

if TYPE_CHECKING:
    from edgeagent.store.metrics import SQLiteMetricsStorage
    from edgeagent.store.twins import SQLiteTwinStore

__all__ = ["StatePart"]

log = logging.getLogger("edgeagent.store.store")


class StatePart(StoreCore):
    """The ``state`` table, and the twin and metrics stores (a part of
    :class:`~edgeagent.store.Store`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._twins: Any = None
        self._metrics: Any = None
        self._sync_listeners: list[Callable[[], None]] = []

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

    # --- the hub's full sync ------------------------------------------------------------

    SYNCED_KEY = "hub.synced"
    """State key: ``{"at": seconds since the epoch, "objects": n}`` of the last full sync."""

    def note_full_sync(self, objects: int) -> None:
        """The hub ended a full sync (``sync_done``): the objects stored now are exactly
        the ones assigned to this node. Records it (state ``hub.synced``, committed at
        once: it decides what the next start may remove) and tells the sync listeners.

        Args:
            objects: how many objects the hub says this node holds.

        Raises:
            StoreError: the record could not be written (the listeners are still told).
        """
        try:
            self.set_state(self.SYNCED_KEY, {"at": self._wall(), "objects": objects})
            self.flush()
        finally:
            for listener in list(self._sync_listeners):
                try:
                    listener()
                except Exception:  # a listener's bug must not fail the sync
                    log.exception("sync listener failed")

    def synced_before(self) -> bool:
        """True when a full sync with the hub was recorded in this file: what it holds is
        the hub's word (a fresh file, or the one made after a damaged one was moved
        aside, has none until the hub's first ``sync_done``)."""
        return self.get_state(self.SYNCED_KEY) is not None

    def add_sync_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every :meth:`note_full_sync`.

        Returns:
            A function that removes the listener.
        """
        self._sync_listeners.append(listener)
        return lambda: self._sync_listeners.remove(listener)

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
