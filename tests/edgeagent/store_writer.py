"""Helper process for the SIGKILL tests: writes to a store as fast as it can.

Usage: python -m tests.edgeagent.store_writer DB [--crash-after-uncommitted]

Prints ``acked N SEQ`` after each commit (everything up to status N and event seq SEQ is
durable), or with ``--crash-after-uncommitted`` hands out seqs without committing, prints
them, and SIGKILLs itself.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys

from edgeagent.settings import StoreSettings
from edgeagent.store import Store


class Ref:
    kind = "Pod"
    namespace = "default"
    name = "writer"
    uid = "writer-pod"


def main() -> None:
    path = pathlib.Path(sys.argv[1])
    store = Store.open(path, StoreSettings(commit_delay=0.0))
    start = (store.pod_status(Ref.uid) or {}).get("n", 0) + 1
    print(f"opened {start}", flush=True)
    if "--crash-after-uncommitted" in sys.argv:
        store.outbox_append("event", {"n": start})
        store.flush()
        seqs = [store.outbox_append("event", {"n": start + i}) for i in range(1, 6)]
        store.outbox_pending()  # a new seq block is committed before seqs can leave
        print("uncommitted " + " ".join(map(str, seqs)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    n = start
    while True:
        store.record_pod_status(Ref, {"phase": "Running", "n": n}, float(n))
        seq = store.outbox_append("event", {"n": n})
        if n % 7 == 0:
            obj = {"metadata": {"name": f"cm{n % 3}"}, "data": {"n": str(n)}}
            ref = type(
                "R",
                (),
                {
                    "kind": "ConfigMap",
                    "namespace": "default",
                    "name": f"cm{n % 3}",
                    "uid": f"cm{n % 3}",
                },
            )
            store.apply_upsert(ref, str(n), obj)
        if n % 3 == 0:
            store.flush()
            print(f"acked {n} {seq}", flush=True)
        n += 1


if __name__ == "__main__":
    main()
