"""SIGKILL of a writing agent, 20 times in a row: the store opens every time, nothing
acknowledged is lost, and sequence numbers never repeat."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

from edgeagent.store import Store

WRITER = [sys.executable, "-m", "tests.edgeagent.store_writer"]


def _spawn(db: pathlib.Path, env: dict, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*WRITER, str(db), *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=pathlib.Path(__file__).parents[2],
    )


def test_sigkill_during_writes_20_times(tmp_path: pathlib.Path, python_env: dict):
    db = tmp_path / "store.db"
    rng = random.Random(5)
    highest_seq_seen = 0
    for round_no in range(20):
        proc = _spawn(db, python_env)
        assert proc.stdout is not None
        opened = proc.stdout.readline()
        assert opened.startswith("opened"), opened
        acked: list[tuple[int, int]] = []
        deadline = time.monotonic() + 0.02 + rng.random() * 0.15
        while True:
            line = proc.stdout.readline()
            if line.startswith("acked"):
                _, n, seq = line.split()
                acked.append((int(n), int(seq)))
            if acked and time.monotonic() >= deadline:
                break
        os.kill(proc.pid, signal.SIGKILL)  # mid-write, at a random instant
        rest = proc.stdout.read()  # acks printed before the kill landed count too
        proc.wait()
        acked += [
            (int(n), int(s))
            for _, n, s in (line.split() for line in rest.splitlines() if line.startswith("acked"))
        ]
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
            seqs = [e.seq for e in store.outbox_pending()]
            assert seqs == sorted(set(seqs))
        finally:
            store.close()


def test_seqs_handed_out_before_a_crash_are_never_reused(tmp_path: pathlib.Path, python_env: dict):
    db = tmp_path / "store.db"
    proc = _spawn(db, python_env, "--crash-after-uncommitted")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    handed_out = [int(s) for s in out.splitlines()[-1].split()[1:]]
    store = Store.open(db)
    try:
        assert len(store.outbox_pending()) == 1  # only the committed event survived
        assert store.next_seq() > max(handed_out)
    finally:
        store.close()
