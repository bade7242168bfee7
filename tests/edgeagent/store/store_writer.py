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
    """Write statuses, events and objects as fast as possible, "sending" every event (its
    seq recorded as a session would give it); after each commit send ``(n, seq)``: status
    ``n`` and every event up to seq ``seq`` are durable."""
    store = Store.open(pathlib.Path(path), StoreSettings(commit_delay=0.0))
    n = (store.pod_status(Ref.uid) or {}).get("n", 0) + 1
    conn.send(("opened", n))
    seq = store.next_seq()
    while True:
        store.record_pod_status(Ref, {"phase": "Running", "n": n}, float(n))
        store.outbox_mark_sent(store.outbox_append("event", {"n": n}), seq)
        seq += 1
        if n % 7 == 0:
            store.apply_upsert(ConfigRef(n), str(n), {"data": {"n": str(n)}})
        if n % 3 == 0:
            store.flush()
            conn.send(("acked", n, seq - 1))
        n += 1


def hand_out_uncommitted(path: str, conn: Connection) -> None:
    """Send and commit one event, send five more whose seqs are not committed, report
    those seqs and wait to be killed."""
    store = Store.open(pathlib.Path(path), StoreSettings(commit_delay=0.0))
    seq = store.next_seq()
    store.outbox_mark_sent(store.outbox_append("event", {"n": 0}), seq)
    store.flush()
    seqs = []
    for i in range(1, 6):
        seq += 1
        store.outbox_mark_sent(store.outbox_append("event", {"n": i}), seq)
        seqs.append(seq)
    conn.send(seqs)
    conn.recv()  # killed while waiting


def use_seqs_outside_the_outbox(path: str, conn: Connection) -> None:
    """Use 2000 seqs for messages kept elsewhere (no outbox rows, no explicit flush),
    report the last one and wait to be killed."""
    store = Store.open(pathlib.Path(path), StoreSettings(commit_delay=0.0))
    first = store.next_seq()
    for seq in range(first, first + 2000):
        store.note_seq_used(seq)
    conn.send(first + 1999)
    conn.recv()
