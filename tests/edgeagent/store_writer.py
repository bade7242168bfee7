"""Writer process for the SIGKILL tests, started from a forkserver that has the store
already imported (a fresh interpreter per round would cost 0.3 s each)."""

from __future__ import annotations

import pathlib
from multiprocessing.connection import Connection

from edgeagent.settings import StoreSettings
from edgeagent.store import Store


class Ref:
    kind = "Pod"
    namespace = "default"
    name = "writer"
    uid = "writer-pod"


class ConfigRef:
    kind = "ConfigMap"
    namespace = "default"

    def __init__(self, n: int) -> None:
        self.name = self.uid = f"cm{n % 3}"


def write_forever(path: str, conn: Connection) -> None:
    """Write statuses, events and objects as fast as possible; after each commit send
    ``(n, seq)``: status ``n`` and every event up to ``seq`` are durable."""
    store = Store.open(pathlib.Path(path), StoreSettings(commit_delay=0.0))
    n = (store.pod_status(Ref.uid) or {}).get("n", 0) + 1
    conn.send(("opened", n))
    while True:
        store.record_pod_status(Ref, {"phase": "Running", "n": n}, float(n))
        seq = store.outbox_append("event", {"n": n})
        if n % 7 == 0:
            store.apply_upsert(ConfigRef(n), str(n), {"data": {"n": str(n)}})
        if n % 3 == 0:
            store.flush()
            conn.send(("acked", n, seq))
        n += 1


def hand_out_uncommitted(path: str, conn: Connection) -> None:
    """Commit one event, hand out five more seqs without committing them, report them
    and wait to be killed."""
    store = Store.open(pathlib.Path(path), StoreSettings(commit_delay=0.0))
    store.outbox_append("event", {"n": 0})
    store.flush()
    seqs = [store.outbox_append("event", {"n": i}) for i in range(1, 6)]
    store.outbox_pending()  # (a new seq block is committed before seqs can leave)
    conn.send(seqs)
    conn.recv()  # killed while waiting
