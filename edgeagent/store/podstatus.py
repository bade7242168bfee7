"""The last status the agent computed per pod (restart counts survive an agent restart or
a reboot); recording one also queues its ``pod_status`` message (latest wins)."""

from __future__ import annotations

import json
from typing import Any

from edgeagent.store.db import dumps
from edgeagent.store.objects import RefLike, ref_dict
from edgeagent.store.outbox import OutboxPart

__all__ = ["PodStatusPart", "pod_coalesce_key"]


def pod_coalesce_key(uid: str) -> str:
    """The latest-wins key of ``pod_status`` and ``pod_deleted`` messages for a pod."""
    return "pod:" + uid


class PodStatusPart(OutboxPart):
    """The ``pod_status`` table (a part of :class:`~edgeagent.store.Store`)."""

    def record_pod_status(self, ref: RefLike, status: dict[str, Any], observed_at: float) -> int:
        """Keep a pod's latest status and queue a ``pod_status`` message (latest wins).

        Batched: committed within ``commit_delay``.

        Args:
            ref: the pod.
            status: the PodStatus JSON.
            observed_at: wall-clock seconds when it was observed.

        Returns:
            The outbox id of the queued message.

        Raises:
            StoreFullError: no space (the lost-writes listeners are called).
        """
        with self._write() as conn:
            conn.execute(
                "INSERT INTO pod_status (uid, status, observed_at) VALUES (?, ?, ?) "
                "ON CONFLICT(uid) DO UPDATE SET status=excluded.status, "
                "observed_at=excluded.observed_at",
                (ref.uid, dumps(status), observed_at),
            )
            entry_id = self._append(
                conn,
                "pod_status",
                {"ref": ref_dict(ref), "status": status, "observed_at": observed_at},
                pod_coalesce_key(ref.uid),
            )
        return entry_id

    def pod_status(self, uid: str) -> dict[str, Any] | None:
        """The last recorded status of a pod, or ``None``."""
        rows = self._read("SELECT status FROM pod_status WHERE uid = ?", (uid,))
        return json.loads(rows[0][0]) if rows else None

    def pod_statuses(self) -> dict[str, dict[str, Any]]:
        """Every recorded pod status by uid."""
        return {uid: json.loads(s) for uid, s in self._read("SELECT uid, status FROM pod_status")}
