"""An operator's ``sqlite3`` session holding the store's write lock while a real agent runs
a real hub session in this process (issue 15 item 18): the event loop keeps its pace, the
session stays up, and what could not be written then is written once the lock is free."""

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
