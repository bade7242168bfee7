"""A full disk under a running agent: a clear error, pods keep running, status resumes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib

from edgeagent.agent import Agent
from edgeagent.sdnotify import Notifier
from edgeagent.store import Store
from tests.disk import fill
from tests.edgeagent.conftest import Ref, agent_settings, container, make_pod
from tests.waiting import eventually


def _phase(state: pathlib.Path, uid: str) -> str | None:
    store = Store.open_readonly(state / "store.db")
    try:
        return (store.pod_status(uid) or {}).get("phase")
    finally:
        store.close()


async def _running(state: pathlib.Path, uid: str) -> bool:
    from edgeagent.runtime import ContainerState, Labels
    from edgeagent.runtime.process import ProcessRuntime
    from edgeagent.settings import ProcessSettings

    rt = ProcessRuntime(state / "runtime" / "process", ProcessSettings())
    await rt.connect()
    try:
        infos = await rt.list({Labels.POD_UID: uid})
        return any(i.state is ContainerState.RUNNING for i in infos)
    finally:
        await rt.close()


async def test_full_disk_keeps_pods_running(small_fs: pathlib.Path, caplog):
    settings = agent_settings(small_fs, "process")
    settings = dataclasses.replace(
        settings, store=dataclasses.replace(settings.store, commit_delay=0.1, full_retry=0.5)
    )
    steady = make_pod("steady", [container("c", "sleep 600", "process")])
    finisher = make_pod(
        "finisher", [container("c", "sleep 1.5; exit 0", "process")], restartPolicy="Never"
    )
    store = Store.open(settings.store_path, settings.store)
    for pod in (steady, finisher):
        meta = pod["metadata"]
        store.apply_upsert(Ref("Pod", "default", meta["name"], meta["uid"]), "1", pod)
    store.close()
    stop = asyncio.Event()
    agent = Agent(settings, notifier=Notifier(None))
    task = asyncio.create_task(agent.run(stop))
    try:
        await eventually(
            lambda: (
                _phase(small_fs, steady["metadata"]["uid"]) == "Running"
                and _phase(small_fs, finisher["metadata"]["uid"]) == "Running"
            ),
            timeout=20,
            what="both pods running",
        )
        with caplog.at_level(logging.ERROR):
            filler = fill(small_fs)
            # the finisher exits: its status change cannot be saved
            await eventually(
                lambda: "disk full" in caplog.text, timeout=20, what="a clear disk-full error"
            )
        assert "running pods are unaffected" in caplog.text
        assert not task.done(), "the agent keeps running"
        assert _phase(small_fs, finisher["metadata"]["uid"]) == "Running"  # not saved
        assert await _running(small_fs, steady["metadata"]["uid"])
        filler.unlink()
        await eventually(
            lambda: _phase(small_fs, finisher["metadata"]["uid"]) == "Succeeded",
            timeout=20,
            what="status saved once space is back",
        )
        assert _phase(small_fs, steady["metadata"]["uid"]) == "Running"
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        from edgeagent.runtime.process import ProcessRuntime
        from edgeagent.settings import ProcessSettings

        rt = ProcessRuntime(small_fs / "runtime" / "process", ProcessSettings())
        await rt.connect()
        for info in await rt.list():
            await rt.remove(info.id)
        await rt.close()


class _WritesState:
    """A service that commits a write at every start (as the uplink's seq reservation
    does at every dial): on a full disk it fails with the store's StoreFullError."""

    name = "writer"

    def __init__(self) -> None:
        self.starts = 0
        self.go = asyncio.Event()  # set by the test once the disk is full

    async def run(self, ctx) -> None:
        await self.go.wait()
        self.starts += 1
        ctx.store.set_state("test.writer", "x" * 4096 + str(self.starts))
        ctx.store.flush()
        await asyncio.Event().wait()


async def test_a_service_failing_on_a_full_disk_says_so_in_one_line(small_fs: pathlib.Path, caplog):
    # Seen on a real agent whose state directory filled up: the hub service failed at
    # every dial and the log repeated a 30-line traceback every 5 s for a known condition.
    settings = agent_settings(small_fs, "process")
    service = _WritesState()
    stop = asyncio.Event()
    agent = Agent(settings, notifier=Notifier(None), services=[service])
    with caplog.at_level(logging.ERROR, logger="edgeagent.agent"):
        task = asyncio.create_task(agent.run(stop))
        filler = small_fs / "filler"
        try:
            await eventually(lambda: agent.context is not None, timeout=20, what="ready")
            filler = fill(small_fs)
            service.go.set()
            await eventually(
                lambda: "service writer" in caplog.text, timeout=20, what="the service failure"
            )
            filler.unlink()
            await eventually(lambda: service.starts >= 2, timeout=20, what="the restart")
        finally:
            filler.unlink(missing_ok=True)
            stop.set()
            await asyncio.wait_for(task, timeout=30)
    failures = [r for r in caplog.records if "service writer" in r.getMessage()]
    assert failures and all(r.exc_info is None for r in failures)  # no traceback
    assert "disk full" in failures[0].getMessage() and "restarting" in failures[0].getMessage()
