"""The agent's store next to a real hub session in this process (issue 15 item 18): an
operator's ``sqlite3`` session holding the write lock stalls neither the event loop nor the
session, and what could not be written then is written once the lock is free; a backlog
the hub acknowledged is given back to the file system by the agent's housekeeping."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

from cloudhub.kube import PODS, KubeClient
from tests.edgeagent.hublink.fleet import HubRunner, eventually
from tests.edgeagent.hublink.objects import pod
from tests.edgeagent.uplink.test_session import hub, make_agent  # noqa: F401 (fixtures)

HOLD = 6.0
"""Seconds the operator keeps the write lock (more than the old 5 s busy timeout)."""


class Operator:
    """A real SQLite connection on its own thread, as ``sqlite3 store.db`` would be, in a
    ``BEGIN IMMEDIATE`` transaction (the write lock) until :meth:`release`."""

    def __init__(self, path) -> None:
        self._path = path
        self.holding = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._run, name="operator-shell", daemon=True)

    def _run(self) -> None:
        conn = sqlite3.connect(str(self._path), timeout=30)  # waits out the agent's batch
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("SELECT COUNT(*) FROM outbox").fetchall()
            self.holding.set()
            self._release.wait(60)
            conn.rollback()
        finally:
            conn.close()

    async def hold(self) -> None:
        self._thread.start()
        await eventually(self.holding.is_set, "the operator holds the write lock")

    async def release(self) -> None:
        self._release.set()
        await asyncio.to_thread(self._thread.join, 30)


async def _loop_gaps(stop: asyncio.Event, gaps: list[float]) -> None:
    """Record how late every 20 ms tick runs (the event loop's responsiveness)."""
    while not stop.is_set():
        t0 = time.monotonic()
        await asyncio.sleep(0.02)
        gaps.append(time.monotonic() - t0 - 0.02)


async def test_an_operator_holding_the_write_lock_neither_stalls_nor_drops_the_session(
    make_agent,  # noqa: F811
    hub: HubRunner,  # noqa: F811
    namespace: str,
    kube: KubeClient,
):
    agent = make_agent("edge-locked")
    await agent.connected()
    first = agent.link.connection_id()
    store = agent.store
    operator = Operator(store.path)
    await operator.hold()

    stop, gaps = asyncio.Event(), []
    ticker = asyncio.create_task(_loop_gaps(stop, gaps))
    try:
        # The hub sends a pod while the lock is held: the agent must store it, and report
        # its status, both of which wait for the lock.
        await kube.create(PODS, pod("locked", namespace, "edge-locked", "exec sleep 600"))
        await asyncio.sleep(HOLD)  # the operator's transaction lasts this long
        print(f"\nwhile locked: loop lag max {max(gaps) * 1000:.0f} ms over {len(gaps)} ticks")
        assert store.find_object("Pod", namespace, "locked") is None  # nothing got in
        assert agent.link.connection_id() == first  # the session is still up
        await operator.release()

        stored = await eventually(
            lambda: store.find_object("Pod", namespace, "locked"), "the pod stored after"
        )

        async def running() -> bool:
            got = await kube.get(PODS, "locked", namespace=namespace)
            return (got.get("status") or {}).get("phase") == "Running"

        await eventually(running, "the pod's status reached the API")
    finally:
        stop.set()
        await ticker
        await operator.release()
    assert stored.name == "locked"
    assert agent.link.connection_id() == first, "the session was torn down"
    assert gaps, "the ticker never ran"
    # The old 5 s busy timeout on the loop's thread showed as one gap of ~5 s.
    assert max(gaps) < 0.5, f"the event loop stalled {max(gaps):.2f} s"


async def test_the_agent_gives_a_drained_backlog_back_to_the_file_system(
    make_agent,  # noqa: F811
    hub: HubRunner,  # noqa: F811
):
    agent = make_agent("edge-backlog")
    await agent.connected()
    store = agent.store
    node = {"kind": "Node", "namespace": "", "name": "edge-backlog", "uid": "edge-backlog"}
    wal = store.path.with_name(store.path.name + "-wal")

    def size() -> int:
        return store.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    empty = size()
    for i in range(600):  # what an offline week of Events leaves, ~1 page each
        store.outbox_append(
            "event",
            {
                "ref": node,
                "type": "Normal",
                "reason": "Backlog",
                "message": f"{i:06d}" * 340,
                "timestamp": time.time(),
                "count": 1,
            },
        )
    store.flush()
    grown = size()
    assert grown > empty + 2 * 1024 * 1024
    await eventually(lambda: store.outbox_depth() == 0, "the hub acknowledged the backlog")
    await eventually(lambda: size() < empty + 512 * 1024, "the free pages given back", 30)
