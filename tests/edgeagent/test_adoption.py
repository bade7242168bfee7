"""Start-up with a store that is not the hub's word (issue 15 item 6a): after a damaged
store is moved aside, or on any start whose store never recorded a full sync, the running
containers are adopted, not removed, until the hub's first full sync says which pods stay;
the recovery is reported. A store in sync still removes what it no longer holds at start.
Both runtimes (the process runtime and podman's Docker API)."""

from __future__ import annotations

import pytest

from edgeagent.runtime import ContainerState, Labels
from edgeagent.store import Store
from tests.edgeagent.conftest import Harness, container, make_pod
from tests.waiting import eventually

pytestmark = pytest.mark.podman


async def _running_ids(harness: Harness, pod: dict) -> set[str]:
    infos = await harness.runtime.list({Labels.POD_UID: pod["metadata"]["uid"]})
    return {
        i.id
        for i in infos
        if i.state is ContainerState.RUNNING and i.labels.get(Labels.CONTAINER_TYPE) == "app"
    }


def _reopen_damaged(harness: Harness) -> Store:
    """What a power cut on an SD card leaves: the agent is gone, the file is garbage."""
    harness.store.close()
    with open(harness.settings.store_path, "r+b") as f:
        f.write(b"\x00garbage" * 512)
    store = Store.open(harness.settings.store_path, harness.settings.store)
    harness.store = store
    return store


async def test_a_recovered_store_adopts_running_pods_until_the_hubs_full_sync(harness: Harness):
    kept = harness.apply(make_pod("kept", [container("c", "sleep 600", harness.kind)]))
    gone = harness.apply(
        make_pod(
            "gone", [container("c", "sleep 600", harness.kind)], terminationGracePeriodSeconds=1
        )
    )
    await harness.wait_phase(kept, "Running")
    await harness.wait_phase(gone, "Running")
    kept_ids, gone_ids = await _running_ids(harness, kept), await _running_ids(harness, gone)
    assert kept_ids and gone_ids

    await harness.stop()
    store = _reopen_damaged(harness)
    assert store.recovered_from is not None and store.inventory() == {}
    await harness.start()  # offline: no hub to ask

    uids = sorted(p["metadata"]["uid"] for p in (kept, gone))
    adoption = await eventually(
        lambda: (
            (store.get_state("pods.adoption") or {}).get("state") == "adopting"
            and store.get_state("pods.adoption")
        ),
        what="the reconciler's start-up scan",
    )
    assert adoption["pods"] == uids
    assert adoption["reason"] == "StoreRecovered"
    assert adoption["recoveredFrom"] == str(store.recovered_from)
    assert adoption["runningContainers"] == 2
    # nothing was stopped: the same containers still run
    assert await _running_ids(harness, kept) == kept_ids
    assert await _running_ids(harness, gone) == gone_ids
    events = [e.body for e in store.outbox_pending() if e.kind == "event"]
    node_events = [e for e in events if e["ref"]["kind"] == "Node"]
    assert len(node_events) == 1, events
    event = node_events[0]
    assert event["ref"]["name"] == "edge-test" and event["type"] == "Warning"
    assert event["reason"] == "StoreRecovered"
    assert str(store.recovered_from) in event["message"] and "2 running" in event["message"]

    # the hub reconnects: its diff sends the one pod still assigned, then sync_done
    harness.apply(kept)
    store.note_full_sync(1)

    async def gone_removed() -> bool:
        return await harness.runtime.list({Labels.POD_UID: gone["metadata"]["uid"]}) == []

    await eventually(gone_removed, timeout=30, what="the unassigned pod's containers removed")
    assert await _running_ids(harness, kept) == kept_ids  # adopted, never restarted
    await harness.wait_phase(kept, "Running")
    assert harness.container_status(kept, "c")["restartCount"] == 0
    ended = await eventually(
        lambda: (
            (store.get_state("pods.adoption") or {}).get("state") == "ended"
            and store.get_state("pods.adoption")
        ),
        what="the adoption recorded as ended",
    )
    assert ended["kept"] == [kept["metadata"]["uid"]]
    assert store.synced_before()


async def test_a_store_in_sync_removes_what_it_no_longer_holds_at_start(harness: Harness):
    pod = harness.apply(
        make_pod(
            "deleted-offline",
            [container("c", "sleep 600", harness.kind)],
            terminationGracePeriodSeconds=1,
        )
    )
    await harness.wait_phase(pod, "Running")
    await harness.stop()
    # while the agent was down, the last sync said: this pod is no longer assigned
    harness.store.apply_delete(pod["metadata"]["uid"])
    harness.store.note_full_sync(0)
    assert harness.store.synced_before()
    assert await _running_ids(harness, pod)
    await harness.start()

    async def removed() -> bool:
        return await harness.runtime.list({Labels.POD_UID: pod["metadata"]["uid"]}) == []

    await eventually(removed, timeout=30, what="the deleted pod's containers removed at start")
    assert harness.store.get_state("pods.adoption") is None


async def test_a_fresh_store_adopts_without_calling_it_a_recovery(harness: Harness):
    pod = harness.apply(make_pod("leftover", [container("c", "sleep 600", harness.kind)]))
    await harness.wait_phase(pod, "Running")
    ids = await _running_ids(harness, pod)
    await harness.stop()
    # the state directory's store was deleted by hand: a new, empty file
    harness.store.close()
    for suffix in ("", "-wal", "-shm"):
        path = harness.settings.store_path.with_name(harness.settings.store_path.name + suffix)
        path.unlink(missing_ok=True)
    store = harness.store = Store.open(harness.settings.store_path, harness.settings.store)
    assert store.recovered_from is None and not store.synced_before()
    await harness.start()
    adoption = await eventually(
        lambda: store.get_state("pods.adoption"), what="the reconciler's start-up scan"
    )
    assert adoption["reason"] == "NeverSynced" and adoption["pods"] == [pod["metadata"]["uid"]]
    assert await _running_ids(harness, pod) == ids
    reasons = [e.body["reason"] for e in store.outbox_pending() if e.kind == "event"]
    assert reasons == ["ContainersAdopted"]
