"""A reconnecting fleet cannot flood the API: pod status writes stay within status.qps."""

from __future__ import annotations

import asyncio
import time

import pytest

from cloudhub.kube import PODS, KubeClient
from tests.cloudhub.hub.conftest import DEADLINE, Cluster, Hubs, InThread, pod
from tests.sim import SimAgent
from tests.waiting import eventually

NODES = 200
QPS = 50.0
BURST = 10


@pytest.fixture
def cluster(threaded_cluster: tuple[Cluster, InThread]) -> Cluster:
    """The API on its own thread: write times are the API's, not the busy test loop's."""
    return threaded_cluster[0]


async def watch_writes(kubeconfig: str, namespace: str, rv: str, writes: list[float]) -> None:
    """Record when each pod write reaches a watch (runs on the API's thread)."""
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        async for kind, _ in client.watch(
            PODS, namespace, resource_version=rv, timeout_seconds=120
        ):
            if kind == "MODIFIED":
                writes.append(time.monotonic())
    finally:
        await client.close()


def restarts(p: dict) -> int:
    statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0].get("restartCount", 0)


@pytest.mark.slow
async def test_status_storm_from_200_reconnecting_nodes_stays_within_qps(
    hubs: Hubs, kube: KubeClient, namespace: str, unique, threaded_cluster
) -> None:
    hub = await hubs.start({"status.qps": 1000.0, "status.burst": 1000})
    ports = {"listen.quic_port": hub.quic_port, "listen.websocket_port": hub.websocket_port}
    prefix = unique("storm")
    agents: list[SimAgent] = [
        # no status at first: the storm is the statuses they all report when reconnecting
        hubs.agent(f"{prefix}-{i}", auto_status=False, report_on_connect=True)
        for i in range(NODES)
    ]
    await asyncio.gather(
        *(kube.create(PODS, pod(f"p{i}", namespace, a.name)) for i, a in enumerate(agents))
    )
    await asyncio.gather(*(a.wait_for(lambda a=a: len(a.store) == 1, 60.0) for a in agents))

    # Watch every pod write from here on, on the API's own thread.
    writes: list[float] = []
    _, rv = await kube.list(PODS, namespace)
    cluster, thread = threaded_cluster
    watcher = asyncio.run_coroutine_threadsafe(
        watch_writes(str(cluster.kubeconfig), namespace, rv, writes), thread.loop
    )
    try:
        # The hub restarts with the production limit; every node reconnects at once and
        # reports a new status for its pod (its container restarted meanwhile).
        await hubs.stop(hub)
        await hubs.start({**ports, "status.qps": QPS, "status.burst": BURST})
        await asyncio.gather(*(a.wait_for(lambda a=a: a.sessions >= 2, DEADLINE) for a in agents))

        async def all_written() -> bool:
            pods, _ = await kube.list(PODS, namespace)
            return sum(restarts(p) == 1 for p in pods) == NODES

        await eventually(all_written, "every restart written", 60, state=lambda: len(writes))
        await asyncio.gather(*(a.wait_for(lambda a=a: a.all_acked, DEADLINE) for a in agents))
    finally:
        watcher.cancel()
        await asyncio.gather(asyncio.wrap_future(watcher), return_exceptions=True)

    assert len(writes) >= NODES
    # Over every window, no more writes than the bucket allows: burst + qps * window.
    # The watch sees a write some milliseconds after the API made it, up to a few hundred
    # while 200 reconnecting agents keep the test's thread (and the GIL) busy: 250 ms of
    # tolerance on the window. Without the limit the 200 writes take under two seconds.
    writes = sorted(writes)
    for i, start in enumerate(writes):
        for j in range(i + 1, len(writes)):
            window = writes[j] - start
            allowed = BURST + QPS * (window + 0.25) + 1
            assert j - i + 1 <= allowed, (
                f"{j - i + 1} writes in {window:.2f} s (allowed {allowed:.1f})"
            )
    span = writes[-1] - writes[0]
    assert span >= (NODES - BURST) / QPS * 0.9, f"{NODES} writes in only {span:.2f} s"
