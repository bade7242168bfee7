"""SIGKILL of a writing agent, 20 times in a row: the store opens every time, nothing
acknowledged is lost, and sequence numbers never repeat."""

from __future__ import annotations

import multiprocessing
import pathlib
import random
import time

import pytest

from edgeagent.store import Store
from tests.edgeagent.store import store_writer


@pytest.fixture(scope="module")
def ctx():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.edgeagent.store.store_writer"])
    return context


def test_sigkill_during_writes_20_times(tmp_path: pathlib.Path, ctx):
    db = tmp_path / "store.db"
    rng = random.Random(5)
    highest_seq_seen = 0
    for round_no in range(20):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=store_writer.write_forever, args=(str(db), child))
        proc.start()
        child.close()
        assert parent.recv()[0] == "opened"
        acked: list[tuple[int, int]] = []
        deadline = time.monotonic() + 0.02 + rng.random() * 0.1
        while not acked or time.monotonic() < deadline:
            _, n, seq = parent.recv()
            acked.append((n, seq))
        proc.kill()  # SIGKILL, mid-write, at a random instant
        proc.join()
        while parent.poll():  # acks sent before the kill landed count too
            try:
                _, n, seq = parent.recv()
            except EOFError:
                break
            acked.append((n, seq))
        parent.close()
        last_n, last_seq = max(acked)
        store = Store.open(db)
        try:
            assert store.recovered_from is None, f"round {round_no}: store was damaged"
            assert store.pod_status("writer-pod")["n"] >= last_n, round_no
            events = {e.body["n"] for e in store.outbox_pending() if e.kind == "event"}
            missing = [n for n, _ in acked if n not in events]
            assert not missing, (round_no, missing)
            assert store.next_seq() > last_seq
            assert store.next_seq() > highest_seq_seen
            highest_seq_seen = max(highest_seq_seen, last_seq)
            seqs = [e.seq for e in store.outbox_sent()]
            assert seqs == sorted(set(seqs)) and max(seqs) >= last_seq
        finally:
            store.close()


def test_seqs_handed_out_before_a_crash_are_never_reused(tmp_path: pathlib.Path, ctx):
    db = tmp_path / "store.db"
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=store_writer.hand_out_uncommitted, args=(str(db), child))
    proc.start()
    handed_out = parent.recv()
    proc.kill()
    proc.join()
    store = Store.open(db)
    try:
        assert [e.body["n"] for e in store.outbox_sent()] == [0]  # only the committed one
        assert store.outbox_unsent() == []  # the rest was never committed
        assert store.next_seq() > max(handed_out)
    finally:
        store.close()


def test_seqs_used_outside_the_outbox_survive_a_crash(tmp_path: pathlib.Path, ctx):
    db = tmp_path / "store.db"
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=store_writer.use_seqs_outside_the_outbox, args=(str(db), child))
    proc.start()
    last = parent.recv()
    proc.kill()
    proc.join()
    store = Store.open(db)
    try:
        assert store.next_seq() > last
    finally:
        store.close()
