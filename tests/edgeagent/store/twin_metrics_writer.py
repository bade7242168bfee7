"""Writer process for the twin and metrics SIGKILL test, started from a forkserver that has
the store already imported.

It reports to the parent only what is acknowledged: ``("reported", n)`` once the reports up
to ``n`` are committed (the device API answers a mapper at that point) and ``("sealed",
batch_seq, sha256 of the body)`` once a batch is sealed (it would be sent right then)."""

from __future__ import annotations

import hashlib
import pathlib
from multiprocessing.connection import Connection

from edgeagent.devices import EdgeTwins, Reading
from edgeagent.metrics import MetricsForwarder, MetricsSettings
from edgeagent.settings import StoreSettings
from edgeagent.store import Store
from protocol.metrics_codec import Metric, Sample
from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device

NOW = 1_700_000_000.0


def write_forever(path: str, conn: Connection) -> None:
    store = Store.open(pathlib.Path(path), StoreSettings(commit_delay=0.0))
    twins = EdgeTwins(store.twins(), history_limit=1_000_000)
    twins.upsert_model(THERMOSTAT_MODEL)
    twins.upsert_device(device())
    last = twins.reported("default", "thermo-1").get("temperature")
    n = int(last.value) + 1 if last is not None else 1
    forwarder = MetricsForwarder(
        store.metrics(), MetricsSettings(batch_max_samples=5, max_in_flight=1_000_000)
    )
    conn.send(("opened", n))
    while True:
        twins.report(
            "default",
            "thermo-1",
            [Reading("temperature", float(n)), Reading("label", f"n{n}")],
            now=NOW + n,
            history=n % 3 == 0,
        )
        forwarder.add(_sample(n))
        if n % 4 == 0:
            store.flush()  # what Store.wait_committed waits for before the API answers
            conn.send(("reported", n))
        if n % 7 == 0:
            batch = forwarder.seal()
            if batch is not None:
                conn.send(("sealed", batch.batch_seq, hashlib.sha256(batch.body).hexdigest()))
                if batch.batch_seq > 2 and n % 2:
                    forwarder.acked(batch.batch_seq - 2)
        n += 1


def _sample(n: int) -> Sample:
    return Sample(
        1_700_000_000_000 + n * 15_000,
        15_000,
        {(Metric.NODE_CPU_USAGE_MS, None): n, (Metric.NODE_MEMORY_AVAILABLE_KIB, None): 1000 + n},
    )
