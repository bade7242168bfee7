"""The device API over the agent's SQLite store answers a report only once it is committed,
and says so when it could not be kept (disk full)."""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3

from edgeagent.devices import EdgeTwins
from edgeagent.mappers import DeviceAPIError, DeviceClient
from edgeagent.store import Store
from tests.disk import fill

from .helpers import THERMOSTAT_MODEL, device, running_api


def _committed_reports(path: pathlib.Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM twin_reported").fetchone()[0]
    finally:
        conn.close()


def _twins(store: Store) -> EdgeTwins:
    twins = EdgeTwins(store.twins())
    twins.upsert_model(THERMOSTAT_MODEL)
    twins.upsert_device(device())
    return twins


async def test_a_report_is_answered_once_committed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "store.db"
    with Store.open(path) as store:
        twins = _twins(store)
        async with running_api(twins, durable=store.wait_committed) as server:
            client = DeviceClient(server.socket_path)
            answer = asyncio.ensure_future(
                client.report("default", "thermo-1", {"temperature": 19.5})
            )
            stored = asyncio.Event()
            remove = twins.add_listener(lambda _event: stored.set())
            await asyncio.wait_for(stored.wait(), 15)  # stored, not yet committed
            remove()
            # no answer while it is not committed (without the wait it comes in milliseconds)
            done, _ = await asyncio.wait([answer], timeout=0.5)
            assert not done and _committed_reports(path) == 0
            store.flush()  # what the agent's housekeeping does within commit_delay
            accepted = await asyncio.wait_for(answer, 15)
            assert [a.value for a in accepted] == [19.5]
            assert _committed_reports(path) == 1


async def test_a_report_that_cannot_be_kept_gets_507(small_fs: pathlib.Path) -> None:
    store = Store.open(small_fs / "store.db")
    try:
        twins = _twins(store)
        async with running_api(twins, durable=store.wait_committed) as server:
            client = DeviceClient(server.socket_path)
            answer = asyncio.ensure_future(
                client.report("default", "thermo-1", {"temperature": 19.5})
            )
            stored = asyncio.Event()
            remove = twins.add_listener(lambda _event: stored.set())
            await asyncio.wait_for(stored.wait(), 15)
            remove()
            fill(small_fs)
            try:
                store.flush()
            except Exception as exc:  # the flusher logs it; the waiter gets it too
                assert "disk full" in str(exc)
            try:
                await asyncio.wait_for(answer, 15)
            except DeviceAPIError as exc:
                assert (exc.status, exc.reason) == (507, "StoreFull")
            else:
                raise AssertionError("a report that was rolled back was accepted")
            assert twins.reported("default", "thermo-1") == {}  # not kept
    finally:
        (small_fs / "filler").unlink(missing_ok=True)
        store.close()
