"""SIGKILL of an agent writing twin reports and metrics, 20 times in a row: the store opens
every time, no answered report is lost, and a batch identity never names other bytes."""

from __future__ import annotations

import hashlib
import multiprocessing
import pathlib
import random
import time

import pytest

from edgeagent.store import Store
from tests.edgeagent.store import twin_metrics_writer


@pytest.fixture(scope="module")
def ctx():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.edgeagent.store.twin_metrics_writer"])
    return context


def test_sigkill_during_twin_and_metrics_writes_20_times(tmp_path: pathlib.Path, ctx) -> None:
    db = tmp_path / "store.db"
    rng = random.Random(11)
    identities: dict[int, str] = {}  # batch_seq -> sha256 of its body, over every round
    history_acked: set[int] = set()
    sealed_total = 0
    for round_no in range(20):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=twin_metrics_writer.write_forever, args=(str(db), child))
        proc.start()
        child.close()
        assert parent.recv()[0] == "opened"
        messages: list[tuple] = []
        deadline = time.monotonic() + 0.05 + rng.random() * 0.15
        while not any(m[0] == "reported" for m in messages) or time.monotonic() < deadline:
            messages.append(parent.recv())
        proc.kill()  # SIGKILL, mid-write, at a random instant
        proc.join()
        while parent.poll():  # acknowledged before the kill landed counts too
            try:
                messages.append(parent.recv())
            except EOFError:
                break
        parent.close()
        reported = max(m[1] for m in messages if m[0] == "reported")
        history_acked |= {n for n in range(1, reported + 1) if n % 3 == 0}
        sealed = [(m[1], m[2]) for m in messages if m[0] == "sealed"]
        sealed_total += len(sealed)
        for seq, digest in sealed:
            assert identities.setdefault(seq, digest) == digest, (round_no, seq)
        with Store.open(db) as store:
            assert store.recovered_from is None, f"round {round_no}: store was damaged"
            latest = store.twins().latest_reported("u-1")
            assert latest["temperature"].value >= reported, round_no
            assert int(latest["label"].value[1:]) >= reported, round_no
            assert latest["label"].version >= latest["temperature"].version - 1
            history = store.twins().pending_history(10**7)
            kept = {int(r.value) for r in history if r.property == "temperature"}
            assert history_acked <= kept, (round_no, sorted(history_acked - kept)[:5])
            batches = {b.batch_seq: b for b in store.metrics().batches()}
            for seq, batch in batches.items():
                digest = hashlib.sha256(batch.body).hexdigest()
                assert identities.setdefault(seq, digest) == digest, (round_no, seq)
            for seq, _ in sealed:
                # only batches two behind the newest were ever acknowledged
                if seq > max(s for s, _ in sealed) - 2:
                    assert seq in batches, (round_no, seq)
            stream = store.metrics().stream()
            assert stream is not None and stream.next_batch_seq > max(identities, default=0)
    assert sealed_total > 20  # the kills landed among seals, not only before the first
