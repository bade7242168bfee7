"""End to end, with the hub gone: pods keep running, crashed ones restart, status made
offline is delivered (the latest per pod) after the reconnect; an offline reboot brings
every cached pod back within 5 s and converges once the hub returns; SIGKILL of the agent
while statuses are being written loses no acknowledged status."""

from __future__ import annotations

import asyncio
import itertools
import os
import pathlib
import random
import time

import pytest

from cloudhub.errors import KubeAPIError
from cloudhub.kube import PODS, KubeClient
from tests.edgeagent.conftest import damage_store
from tests.edgeagent.hublink.fleet import eventually
from tests.edgeagent.hublink.objects import (
    condition,
    container_status,
    get_node,
    get_pod,
    is_running,
    pod,
)

pytestmark = pytest.mark.slow


def recovery_bound() -> float:
    """The 5 s goal, stretched when the machine is overloaded (two cores shared with other
    builds; the benchmark reports the real figure). Capped at 15 s."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(15.0, 5.0 * max(1.0, load))


def stored_status(agent, uid: str) -> dict:
    return agent.read_store(lambda s: s.pod_status(uid)) or {}


def restarts(status: dict) -> int:
    return sum(int(cs.get("restartCount", 0)) for cs in status.get("containerStatuses") or [])


async def test_hub_outage_pods_keep_running_and_latest_status_arrives_after(
    fleet, kube: KubeClient, namespace: str, tmp_path: pathlib.Path
):
    agent = fleet.agent("edge-out")
    marks = tmp_path / "marks"
    marks.mkdir()
    mount = {"volumeMounts": [{"name": "marks", "mountPath": "/marks"}]}
    volumes = [{"name": "marks", "hostPath": {"path": str(marks), "type": "Directory"}}]
    steady = await kube.create(PODS, pod("steady", namespace, "edge-out", "exec sleep 600"))
    crasher = await kube.create(PODS, pod("crasher", namespace, "edge-out", "sleep 0.3; exit 1"))
    finisher = await kube.create(
        PODS,
        pod(
            "finisher",
            namespace,
            "edge-out",
            "while [ ! -e marks/go ]; do sleep 0.1; done; exit 0",
            restartPolicy="Never",
            container=mount,
            volumes=volumes,
        ),
    )
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in (steady, crasher, finisher)}

    async def online_state():
        s = await get_pod(kube, namespace, "steady")
        f = await get_pod(kube, namespace, "finisher")
        c = await get_pod(kube, namespace, "crasher")
        return is_running(s) and is_running(f) and container_status(c).get("restartCount", 0) >= 1

    await eventually(online_state, "steady and finisher Running, crasher restarted, in the API")
    steady_id = container_status(await get_pod(kube, namespace, "steady"))["containerID"]

    await fleet.hub.stop()
    await eventually(
        lambda: agent.hub_session().get("state") in ("disconnected", "connecting"),
        "the agent noticed the hub is gone",
    )
    crashes_at_outage = restarts(stored_status(agent, uids["crasher"]))
    (marks / "go").write_text("")  # the finisher completes while the hub is away
    await eventually(
        lambda: stored_status(agent, uids["finisher"]).get("phase") == "Succeeded",
        "finisher Succeeded offline",
    )
    await eventually(
        lambda: restarts(stored_status(agent, uids["crasher"])) >= crashes_at_outage + 2,
        "the crasher restarted offline",
    )
    assert uids["steady"] in await agent.running_pods()
    assert agent.read_store(lambda s: s.outbox_depth()) > 0  # kept for the hub
    offline_crashes = restarts(stored_status(agent, uids["crasher"]))

    await fleet.hub.start()

    async def delivered():
        f = await get_pod(kube, namespace, "finisher")
        c = await get_pod(kube, namespace, "crasher")
        s = await get_pod(kube, namespace, "steady")
        return (
            (f or {}).get("status", {}).get("phase") == "Succeeded"
            and container_status(c).get("restartCount", 0) >= offline_crashes
            and is_running(s)
        )

    await eventually(delivered, "the statuses made offline in the API after the reconnect")
    s = await get_pod(kube, namespace, "steady")
    assert container_status(s)["restartCount"] == 0
    assert container_status(s)["containerID"] == steady_id  # never restarted
    f = await get_pod(kube, namespace, "finisher")
    assert container_status(f)["state"]["terminated"]["exitCode"] == 0
    # the latest per pod: what the API shows is what the agent holds now
    await eventually(
        lambda: (
            agent.read_store(lambda st: st.outbox_depth()) == 0
            or restarts(stored_status(agent, uids["crasher"])) > offline_crashes
        ),
        "the outbox drained (or the crasher moved on)",
    )
    # A QUIC dial that straddled the restart may have fallen back to WebSocket: the uplink
    # looks at QUIC again soon (hub.quic_retry_first) and goes back to it.
    await eventually(
        lambda: agent.hub_session().get("transport") == "quic", "back on QUIC after the outage"
    )
    api_f = (await get_pod(kube, namespace, "finisher"))["status"]
    local_f = stored_status(agent, uids["finisher"])
    assert api_f["phase"] == local_f["phase"]
    assert api_f["containerStatuses"] == local_f["containerStatuses"]


@pytest.mark.parametrize("kind", ["process", pytest.param("docker", marks=pytest.mark.podman)])
async def test_offline_reboot_recovers_within_5s_and_converges(
    fleet, kube: KubeClient, namespace: str, kind: str
):
    agent = fleet.agent("edge-boot", kind)
    # On podman the pods use the host network: a bridge sandbox costs podman ~0.5 s of
    # network set-up each, which would measure podman rather than the agent.
    script = "trap 'exit 0' TERM; sleep 600 & wait"
    # 10 pods on the process runtime; 6 on podman keep this suite's time down
    # (tests/edgeagent/test_daemon.py recovers 10 on podman, without a hub).
    count = 10 if kind == "process" else 6
    for i in range(count):
        await kube.create(
            PODS,
            pod(f"app-{i}", namespace, "edge-boot", script, hostNetwork=kind == "docker", grace=2),
        )

    async def all_running():
        items, _ = await kube.list(PODS, namespace)
        return len(items) == count and all(is_running(p) for p in items)

    await eventually(all_running, f"{count} pods Running in the API")
    items, _ = await kube.list(PODS, namespace)
    uids = {p["metadata"]["uid"] for p in items}
    assert await agent.stop() == 0
    await agent.remove_everything()  # the reboot: every process gone
    assert not (await agent.running_pods()) & uids
    await fleet.hub.stop()
    # While the node is down: one pod is deleted and one created in the API.
    await kube.delete(PODS, f"app-{count - 1}", namespace)
    await kube.create(
        PODS, pod("late", namespace, "edge-boot", script, hostNetwork=kind == "docker", grace=2)
    )

    t0 = time.monotonic()
    agent.start()  # the hub is unreachable
    await eventually(
        lambda: _superset(agent.running_pods(), uids), "every cached pod running", timeout=60
    )
    elapsed = time.monotonic() - t0
    bound = recovery_bound()
    print(f"offline reboot recovery of {count} pods ({kind}) with the hub away: {elapsed:.2f} s")
    assert elapsed <= bound, (elapsed, bound, os.getloadavg())
    assert agent.hub_session().get("state") != "connected"

    await fleet.hub.start()

    async def converged():
        items, _ = await kube.list(PODS, namespace)
        names = {p["metadata"]["name"] for p in items}
        if names != {f"app-{i}" for i in range(count - 1)} | {"late"}:
            return False
        return all(is_running(p) for p in items) and all(
            container_status(p).get("restartCount") == (0 if p["metadata"]["name"] == "late" else 1)
            for p in items
        )

    await eventually(converged, "API converged: the deleted pod gone, late running, restarts")
    left = {p["metadata"]["uid"] for p in (await kube.list(PODS, namespace))[0]}
    assert not (await agent.running_pods()) & (uids - left)  # the deleted one stopped
    node = await get_node(kube, "edge-boot")
    assert condition(node, "Ready") == "True"


async def _superset(coro, expected: set[str]) -> bool:
    return expected <= await coro


async def test_sigkill_during_status_writes_loses_no_acknowledged_status(
    fleet, kube: KubeClient, namespace: str
):
    # restarts every ~0.4 s: a status change several times a second per pod
    agent = fleet.agent("edge-kill", sets=("pods.backoff_initial=0.1", "pods.backoff_max=0.2"))
    names = [f"crash-{i}" for i in range(3)]
    for name in names:
        await kube.create(PODS, pod(name, namespace, "edge-kill", "sleep 0.2; exit 1"))
    # Every status the API takes is one the hub acknowledged. Record them all: an
    # acknowledged status lost would show as a restart count going backwards.
    history: dict[str, list[int]] = {n: [] for n in names}
    _, rv = await kube.list(PODS, namespace)

    async def watch():
        nonlocal rv
        while True:
            try:
                async for kind, obj in kube.watch(PODS, namespace, resource_version=rv):
                    rv = obj["metadata"]["resourceVersion"]
                    cs = container_status(obj) if kind != "BOOKMARK" else {}
                    if "restartCount" in cs:
                        history[obj["metadata"]["name"]].append(cs["restartCount"])
            except KubeAPIError:  # a watch cut short: resume from the last version seen
                await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch(), name="e2e-watch")
    try:
        await eventually(
            lambda: all(h and h[-1] >= 1 for h in history.values()), "every pod restarting"
        )
        rng = random.Random(7)
        for _ in range(15):
            # SIGKILL while statuses are being written: after 1-4 more reach the API
            taken = sum(len(h) for h in history.values())
            more = rng.randint(1, 4)
            await eventually(
                lambda taken=taken, more=more: (
                    sum(len(h) for h in history.values()) >= taken + more
                ),
                "more statuses written",
            )
            agent.kill()
            agent.start()
            await eventually(
                lambda: agent.hub_session().get("state") == "connected", "agent back online"
            )
        # Settle: the API catches up with what the agent holds.
        uids = {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in (await kube.list(PODS, namespace))[0]
        }

        async def caught_up():
            for name in names:
                local = restarts(stored_status(agent, uids[name]))
                api = container_status(await get_pod(kube, namespace, name)).get("restartCount", 0)
                if api < local - 1:  # one restart may be in flight
                    return False
            return True

        await eventually(caught_up, "the API caught up with the agent")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    print("restart counts the API took:", history)
    for name, counts in history.items():
        assert counts, name
        regressions = [(a, b) for a, b in itertools.pairwise(counts) if b < a]
        assert not regressions, (name, counts)
    log = agent.log()
    assert "Traceback" not in log and "is unusable" not in log  # the store opened each time
    assert log.count("--- start") == 16


@pytest.mark.parametrize("kind", ["process", pytest.param("docker", marks=pytest.mark.podman)])
async def test_damaged_store_offline_keeps_pods_and_adopts_them_after_the_resync(
    fleet, kube: KubeClient, namespace: str, kind: str
):
    # The SD card's store is damaged while the node is offline: the agent recreates it
    # empty, but the pods it was running must keep running (not be taken for orphans),
    # and the hub's resync must adopt them (no restart), not start them again.
    agent = fleet.agent("edge-damaged", kind)
    script = "trap 'exit 0' TERM; sleep 600 & wait"
    for i in range(2):
        await kube.create(
            PODS,
            pod(f"app-{i}", namespace, "edge-damaged", script, hostNetwork=kind == "docker"),
        )

    async def all_running():
        items, _ = await kube.list(PODS, namespace)
        return len(items) == 2 and all(is_running(p) for p in items)

    await eventually(all_running, "2 pods Running in the API")
    uids = {p["metadata"]["uid"] for p in (await kube.list(PODS, namespace))[0]}
    assert await agent.stop() == 0
    await fleet.hub.stop()
    damage_store(agent.state / "store.db")

    agent.start()  # the hub is unreachable
    await eventually(
        lambda: "until the hub's first full sync" in agent.log(),
        "the orphan scan deferred until the resync",
        timeout=60,
    )
    assert list(agent.state.glob("store.db.corrupt-*"))
    assert uids <= await agent.running_pods()

    await fleet.hub.start()

    async def adopted():
        items, _ = await kube.list(PODS, namespace)
        return (
            {p["metadata"]["uid"] for p in items} == uids
            and all(is_running(p) for p in items)
            and agent.read_store(lambda s: s.synced_before()) is True
        )

    await eventually(adopted, "the pods adopted after the resync")
    assert uids <= await agent.running_pods()
    for item in (await kube.list(PODS, namespace))[0]:
        assert container_status(item).get("restartCount") == 0, item["status"]
