"""Three hub replicas as processes (``cloudhub serve``, ha.enabled) on the reference
kube-apiserver, behind a round-robin balancer standing in for the Service, with real agents
(``edgeagent run``, process runtime) running one pod each (issue 18 items 1, 6, 7).

- SIGKILL of the replica that serves a node: the node's agent reconnects, another replica
  takes the node over once the dead replica's Lease has expired, the Node stays Ready, its
  pod is not restarted, and only one replica ever owns the node at a time.
- A rolling restart of all three (SIGTERM, start again, one after the other): no Node is
  ever seen with Ready other than True, no pod restarts.

What the test sees of the Nodes comes from a watch (an informer), so that a Ready=Unknown
that lasted a moment is seen too.
"""

from __future__ import annotations

import asyncio
import pathlib
import uuid
from collections.abc import AsyncIterator

import pytest

from cloudhub.errors import KubeConflict
from cloudhub.ha import owner_of
from cloudhub.kube import CRDS, LEASES, NAMESPACES, NODES, PODS, Informer, KubeClient
from tests.cloudhub.ha.processes import Balancer, ReplicaProcess
from tests.cloudhub.hub.conftest import eventually
from tests.crds import crd_documents
from tests.edgeagent.hublink.fleet import AgentProcess
from tests.edgeagent.hublink.objects import pod
from tests.testpki import TestPKI

pytestmark = pytest.mark.kubeapiserver

REPO = pathlib.Path(__file__).resolve().parents[3]
REPLICAS = 3
NODES_N = 3
DEADLINE_S = 90.0
#: Short Leases so that the test sees failovers in seconds (production: 6 s / 2 s, 40 s).
FLAGS = (
    "--ha-replica-lease-duration",
    "3",
    "--ha-replica-renew-interval",
    "1",
    "--nodes-lease-interval",
    "1",
    "--nodes-lease-duration",
    "10",
    "--nodes-not-ready-grace",
    "10",
    "--nodes-status-report-interval",
    "5",
    "--session-heartbeat-interval",
    "2",
    "--session-close-timeout",
    "1",
)


def _ready(node: dict) -> str:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") or ""
    return ""


async def _install_crds(kube: KubeClient) -> None:
    for crd in crd_documents():
        try:
            await kube.create(CRDS, crd)
        except KubeConflict:
            pass  # the shared server has them already


class Fleet:
    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.replicas: list[ReplicaProcess] = []
        self.agents: list[AgentProcess] = []
        self.not_ready: list[tuple[str, str]] = []  # (node, Ready status) ever seen
        self.owners: dict[str, list[str]] = {}  # node -> owners in the order seen

    def on_node(self, event: str, node: dict, old: dict | None) -> None:
        name = node["metadata"]["name"]
        if name in self.owners and event != "DELETED" and _ready(node) != "True":
            self.not_ready.append((name, _ready(node)))

    def on_lease(self, event: str, lease: dict, old: dict | None) -> None:
        name = lease["metadata"]["name"]
        owner = owner_of(lease)
        if (
            name in self.owners
            and owner
            and (not self.owners[name] or self.owners[name][-1] != owner)
        ):
            self.owners[name].append(owner)

    async def owner(self, node: str) -> str:
        return owner_of(await self.kube.get(LEASES, node, self.namespace))

    async def restarts(self) -> dict[str, int]:
        pods, _ = await self.kube.list(PODS, self.namespace)
        return {
            p["metadata"]["name"]: sum(
                c.get("restartCount", 0)
                for c in (p.get("status") or {}).get("containerStatuses") or ()
            )
            for p in pods
        }

    async def all_running(self) -> bool:
        pods, _ = await self.kube.list(PODS, self.namespace)
        return len(pods) == NODES_N and all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods
        )


@pytest.fixture
async def fleet(kube_apiserver, pki_ca: TestPKI, tmp_path: pathlib.Path) -> AsyncIterator[Fleet]:
    kubeconfig = str(kube_apiserver.kubeconfig)
    namespace = f"ha-{uuid.uuid4().hex[:6]}"
    kube = await KubeClient.from_kubeconfig(kubeconfig)
    informers: list[Informer] = []
    tasks: list[asyncio.Task] = []
    f = Fleet(kube, namespace)
    try:
        await _install_crds(kube)
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        nodes = Informer(kube, NODES)
        leases = Informer(kube, LEASES, namespace=namespace)
        nodes.add_handler(f.on_node)
        leases.add_handler(f.on_lease)
        informers = [nodes, leases]
        tasks = [asyncio.create_task(i.run()) for i in informers]
        f.replicas = [
            ReplicaProcess(tmp_path / f"hub-{i}", pki_ca, kubeconfig, f"hub-{i}", namespace, FLAGS)
            for i in range(REPLICAS)
        ]
        await asyncio.gather(*(asyncio.to_thread(r.start) for r in f.replicas))
        yield f
    finally:
        for agent in f.agents:
            await agent.stop()
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in f.replicas))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await kube.close()


async def test_replica_death_and_a_rolling_restart_keep_every_node_ready(
    fleet: Fleet, pki_ca: TestPKI, tmp_path: pathlib.Path, request
) -> None:
    async with Balancer([r.port for r in fleet.replicas]) as balancer:
        names = [f"edge-{uuid.uuid4().hex[:6]}-{i}" for i in range(NODES_N)]
        for name in names:
            fleet.owners[name] = []
            await fleet.kube.create(
                PODS, pod(f"app-{name}", fleet.namespace, name, "sleep 3600"), fleet.namespace
            )
            agent = AgentProcess(
                tmp_path / name,
                name,
                "process",
                f"wss://127.0.0.1:{balancer.port}",
                pki_ca.ca,
                sets=("hub.transports=websocket",),  # the balancer forwards TCP only
            )
            fleet.agents.append(agent)
            agent.start()
        try:
            await eventually(fleet.all_running, "every pod Running", DEADLINE_S)

            async def all_ready() -> bool:
                nodes = [
                    await fleet.kube.get(NODES, n) for n in names if await _exists(fleet.kube, n)
                ]
                return len(nodes) == NODES_N and all(_ready(n) == "True" for n in nodes)

            await eventually(all_ready, "every Node Ready", DEADLINE_S)
            fleet.not_ready.clear()  # registration passes through no-condition states
            restarts = await fleet.restarts()
            assert set(restarts.values()) == {0}

            # -- replica death --------------------------------------------------------
            owner = await fleet.owner(names[0])
            victim = next(r for r in fleet.replicas if r.identity == owner)
            moved = [n for n in names if await fleet.owner(n) == owner]
            victim.kill()

            async def moved_away() -> bool:
                owners = [await fleet.owner(n) for n in moved]
                return all(o not in ("", owner) for o in owners) and await all_ready()

            await eventually(moved_away, f"the nodes of {owner} on other replicas", DEADLINE_S)
            assert fleet.not_ready == []
            assert await fleet.restarts() == restarts
            for n in moved:  # one owner after the other, never back to the dead one
                assert fleet.owners[n][-1] != owner and fleet.owners[n].count(owner) == 1
            await asyncio.to_thread(victim.start)

            # -- rolling restart ------------------------------------------------------
            for replica in fleet.replicas:
                await asyncio.to_thread(replica.stop)
                await asyncio.to_thread(replica.start)
            await eventually(all_ready, "every Node Ready after the rolling restart", DEADLINE_S)
            assert fleet.not_ready == []
            assert await fleet.restarts() == restarts
            assert await fleet.all_running()
            for n in names:  # every node moved at least once, one owner at a time
                assert len(fleet.owners[n]) >= 2, fleet.owners
        except BaseException:
            for r in fleet.replicas:
                print(f"--- {r.identity} ---\n{r.log()[-4000:]}")
            for a in fleet.agents:
                print(f"--- {a.node} ---\n{a.log()[-3000:]}")
            raise


async def _exists(kube: KubeClient, name: str) -> bool:
    try:
        await kube.get(NODES, name)
    except Exception:
        return False
    return True
