"""Device twins through the hub: desired-change latency (API write -> the edge notified)
and reported-value latency (report on the edge -> Device status seen in the API), p50/p99,
with 1,000 devices over 100 nodes (``--quick``: 100 devices over 10 nodes).

Set-up: ``python -m cloudhub serve`` on its embedded API, in a process of its own (real
TLS from a test CA; it installs the device CRDs itself); one real agent
(``python -m edgeagent run``, production defaults, QUIC) whose 10 devices this process
serves as a mapper on its local device API (long-polls, reports through the mapper SDK);
the other 99 nodes are simulated agents (``tests.sim.SimAgent``: the real protocol over
real WebSocket/TLS with real node certificates) in this process — 100 real agents at
~40 MiB and their start-up would not fit this 2-core machine. The benchmark talks to the
API through ``cloudhub.kube`` (kubernetes_asyncio's transport) and watches the Devices.

- **Desired**: every device gets one spec change (a merge patch of its desired value),
  paced at ``RATE`` changes/s across the fleet; latency from just before the PATCH to
  the mapper's long-poll answering with the new version (real agent) or the
  ``twin_desired`` of that version arriving (simulated agents).
- **Reported**: every device reports one value, paced at ``RATE``/s; latency from just
  before the report (the mapper's POST, or the simulated agent's ``twin_reported``) to the
  first watch event whose status shows that version.

Devices use KubeEdge's ``vled-01`` model (tests/data): ``status``, INT, ReadWrite.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cloudhub.devices.twin import desired_version, model_revision  # noqa: E402
from cloudhub.errors import KubeAPIError  # noqa: E402
from cloudhub.kube import DEVICEMODELS, DEVICES, NAMESPACES, KubeClient  # noqa: E402
from edgeagent.mappers import APIUnavailable, DeviceAPIError, DeviceClient  # noqa: E402
from protocol import pki  # noqa: E402
from protocol.messages import TwinReported  # noqa: E402
from tests.bench.bench_e2e import HubProcess  # noqa: E402
from tests.edgeagent.hublink.fleet import AgentProcess  # noqa: E402
from tests.sim import SimAgent, node_credentials  # noqa: E402
from tests.testpki import make_test_pki  # noqa: E402
from tests.twins.kubeedge import VLED_DEVICE, VLED_MODEL, device, model  # noqa: E402

RATE = 50.0
"""Changes (and reports) per second across the fleet."""
PER_NODE = 10
"""Devices per node."""
REAL = "bench-twin-real"
"""The node run by a real agent."""


def _percentiles(values: list[float]) -> dict[str, Any]:
    ms = sorted(v * 1000 for v in values)
    if not ms:
        return {"count": 0}

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, round(p / 100 * (len(ms) - 1)))], 1)

    return {
        "count": len(ms),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "max_ms": round(ms[-1], 1),
        "mean_ms": round(statistics.fmean(ms), 1),
    }


async def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s: {what}")
        await asyncio.sleep(0.1)


class StatusWatch:
    """Watches the Devices of a namespace; records when each (uid, reported version) is
    first seen in a status."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.seen: dict[str, list[tuple[int, float]]] = {}  # uid -> (version, first seen)
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        _, rv = await self.kube.list(DEVICES, self.namespace)
        self._task = asyncio.create_task(self._run(rv))

    async def _run(self, rv: str) -> None:
        while True:
            try:
                async for kind, obj in self.kube.watch(
                    DEVICES, self.namespace, resource_version=rv
                ):
                    rv = obj["metadata"]["resourceVersion"]
                    if kind == "BOOKMARK":
                        continue
                    now = time.time()
                    uid = obj["metadata"]["uid"]
                    for twin in (obj.get("status") or {}).get("twins") or []:
                        meta = (twin.get("reported") or {}).get("metadata") or {}
                        if twin.get("propertyName") == "status" and "version" in meta:
                            seen = self.seen.setdefault(uid, [])
                            version = int(meta["version"])
                            if not seen or seen[-1][0] < version:
                                seen.append((version, now))
            except (KubeAPIError, OSError):
                await asyncio.sleep(0.05)

    def first_seen(self, uid: str, version: int) -> float | None:
        for seen_version, at in self.seen.get(uid, ()):
            if seen_version >= version:
                return at
        return None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class Mapper:
    """This process as the real agent's mapper: one long-poll per device."""

    def __init__(self, client: DeviceClient, namespace: str, names: list[str]) -> None:
        self.client = client
        self.namespace = namespace
        self.names = names
        self.arrivals: dict[tuple[str, int], float] = {}  # (name, version) -> when seen
        self.versions: dict[str, int] = {}
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._poll(name)) for name in self.names]

    async def _poll(self, name: str) -> None:
        current = None
        while True:
            try:
                if current is None:
                    desired = await self.client.get_desired(self.namespace, name)
                else:
                    desired = await self.client.wait_desired(
                        self.namespace, name, after=current, wait=60
                    )
            except (APIUnavailable, DeviceAPIError):
                await asyncio.sleep(0.2)
                continue
            now = time.time()
            if current is None or desired.version > current.version:
                self.arrivals.setdefault((name, desired.version), now)
                self.versions[name] = desired.version
            current = desired

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _paced(jobs: list, rate: float) -> None:
    """Start ``jobs`` (coroutine functions) at ``rate`` per second; wait for all."""
    tasks = []
    start = time.monotonic()
    for i, job in enumerate(jobs):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(job()))
    await asyncio.gather(*tasks)


def _hub_process(root: pathlib.Path, pki_ca: Any) -> HubProcess:
    """``cloudhub serve`` as installed: its PKI serves from the CA given in files (the
    test CA, which signed the agents' certificates), its join endpoint on a free port."""
    hub = HubProcess(root, pki_ca)
    tls = root / "tls"
    (tls / "ca.key").write_bytes(pki.dump_private_key_pem(pki_ca.ca.private_key))
    hub.args += [
        "--pki-ca-cert-file",
        str(tls / "ca.crt"),
        "--pki-ca-key-file",
        str(tls / "ca.key"),
        "--pki-join-host",
        "127.0.0.1",
        "--pki-join-port",
        "0",
    ]
    return hub


async def _measure(quick: bool, tmp: pathlib.Path) -> dict:
    nodes = 10 if quick else 100
    pki_ca = make_test_pki()
    hub = _hub_process(tmp / "hub", pki_ca)
    hub.start()
    kube = await KubeClient.from_kubeconfig(str(hub.kubeconfig))
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    sims: list[SimAgent] = []
    agent: AgentProcess | None = None
    mapper: Mapper | None = None
    watch = StatusWatch(kube, namespace)
    try:
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await kube.create(DEVICEMODELS, model(VLED_MODEL, namespace))
        names = [REAL] + [f"bench-twin-{i:03d}" for i in range(1, nodes)]
        devices: dict[str, tuple[str, str]] = {}  # device name -> (node, uid)
        semaphore = asyncio.Semaphore(16)

        async def create(node: str, name: str) -> None:
            body = device(VLED_DEVICE, namespace, node, name=name, desired={"status": "0"})
            async with semaphore:
                obj = await kube.create(DEVICES, body)
            devices[name] = (node, obj["metadata"]["uid"])

        started = time.monotonic()
        await asyncio.gather(
            *(create(node, f"{node}-d{j}") for node in names for j in range(PER_NODE))
        )
        create_s = time.monotonic() - started

        agent = AgentProcess(
            tmp / REAL, REAL, "process", f"quic://127.0.0.1:{hub.port}", pki_ca.ca, quick=False
        )
        agent.start()
        sims = [
            SimAgent(
                name,
                node_credentials(pki_ca.ca, name),
                host="127.0.0.1",
                websocket_port=hub.port,
                transport="websocket",
            )
            for name in names[1:]
        ]
        for sim in sims:
            sim.start()
        real_names = [n for n, (node, _) in devices.items() if node == REAL]
        mapper = Mapper(DeviceClient(str(agent.state / "devices.sock")), namespace, real_names)
        mapper.start()
        started = time.monotonic()
        try:
            await _until(
                lambda: (
                    all(len(s.desired) == PER_NODE for s in sims)
                    and len(mapper.versions) == PER_NODE
                ),
                120,
                "every edge holding its devices' desired state",
            )
        except RuntimeError as exc:
            held = sorted(len(s.desired) for s in sims)
            raise RuntimeError(
                f"{exc}: simulated nodes hold {held}, the real agent's mapper "
                f"{len(mapper.versions)}; agent log: {agent.log()[-3000:]}; hub log: "
                f"{(tmp / 'hub' / 'hub.log').read_text()[-3000:]}"
            ) from None
        connect_s = time.monotonic() - started
        await watch.start()

        # -- desired: one spec change per device -------------------------------------------
        written: dict[str, tuple[float, int]] = {}  # device -> (t0, new desired version)
        revision = model_revision(await kube.get(DEVICEMODELS, "vled-01", namespace))

        async def change(name: str) -> None:
            patch = {"spec": {"properties": [{"name": "status", "desired": {"value": "1"}}]}}
            t0 = time.time()
            obj = await kube.patch(DEVICES, name, patch, namespace)
            written[name] = (t0, desired_version(obj["metadata"]["generation"], revision))

        order = sorted(devices)  # interleaves nodes: name order is node-major, shuffle below
        order = [order[(i * 7919) % len(order)] for i in range(len(order))]
        started = time.monotonic()
        await _paced([lambda n=n: change(n) for n in order], RATE)
        by_uid = {uid: name for name, (_, uid) in devices.items()}
        sim_of = {s.name: s for s in sims}

        def desired_latencies() -> tuple[list[float], list[float]]:
            real, sim = [], []
            arrivals: dict[tuple[str, int], float] = {}
            for s in sims:
                for uid, version, at in s.desired_log:
                    arrivals.setdefault((by_uid[uid], version), at)
            for name, (t0, version) in written.items():
                node = devices[name][0]
                at = (mapper.arrivals if node == REAL else arrivals).get((name, version))
                if at is not None:
                    (real if node == REAL else sim).append(at - t0)
            return real, sim

        await _until(
            lambda: sum(map(len, desired_latencies())) == len(devices), 60, "desired delivered"
        )
        desired_s = time.monotonic() - started
        desired_real, desired_sim = desired_latencies()

        # -- reported: one report per device -----------------------------------------------
        reported: dict[str, tuple[float, int]] = {}  # uid -> (t0, version)

        async def report(name: str) -> None:
            node, uid = devices[name]
            if node == REAL:
                t0 = time.time()
                (accepted,) = await mapper.client.report(namespace, name, {"status": 1})
                reported[uid] = (t0, accepted.version)
            else:
                sim = sim_of[node]
                ref = next(r for r, _, _ in sim.store.values() if r.uid == uid)
                t0 = time.time()
                version = int(t0 * 1000)
                sim.send(
                    TwinReported(ref=ref, property="status", value=1, version=version, timestamp=t0)
                )
                reported[uid] = (t0, version)

        started = time.monotonic()
        await _paced([lambda n=n: report(n) for n in order], RATE)

        def reported_latencies() -> tuple[list[float], list[float]]:
            real, sim = [], []
            for uid, (t0, version) in reported.items():
                at = watch.first_seen(uid, version)
                if at is not None:
                    (real if devices[by_uid[uid]][0] == REAL else sim).append(at - t0)
            return real, sim

        await _until(
            lambda: sum(map(len, reported_latencies())) == len(devices), 60, "reports written"
        )
        reported_s = time.monotonic() - started
        reported_real, reported_sim = reported_latencies()
        return {
            "nodes": nodes,
            "devices": len(devices),
            "real_agent_nodes": 1,
            "simulated_nodes": len(sims),
            "rate_per_s": RATE,
            "create_devices_s": round(create_s, 1),
            "edges_ready_s": round(connect_s, 1),
            "desired": _percentiles(desired_real + desired_sim),
            "desired_real_agent_mapper": _percentiles(desired_real),
            "desired_simulated": _percentiles(desired_sim),
            "desired_phase_s": round(desired_s, 1),
            "reported": _percentiles(reported_real + reported_sim),
            "reported_real_agent_mapper": _percentiles(reported_real),
            "reported_simulated": _percentiles(reported_sim),
            "reported_phase_s": round(reported_s, 1),
        }
    finally:
        await watch.stop()
        if mapper is not None:
            await mapper.stop()
        await asyncio.gather(*(s.stop() for s in sims), return_exceptions=True)
        if agent is not None:
            await agent.stop()
        await kube.close()
        hub.stop()


def run(quick: bool) -> dict:
    results: dict[str, Any] = {"load_average_1m": round(os.getloadavg()[0], 2), "quick": quick}
    with tempfile.TemporaryDirectory(prefix="bench-twins-") as tmp_name:
        results.update(asyncio.run(_measure(quick, pathlib.Path(tmp_name))))
    results["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    scope = f"{results['devices']} devices on {results['nodes']} nodes, {RATE:g}/s"
    return {
        "results": results,
        "goals": [
            {
                "id": "twins.desired_p99_ms",
                "value": results["desired"].get("p99_ms"),
                "target": 500,
                "unit": f"ms (Device spec PATCH -> edge notified; {scope})",
                "op": "<=",
            },
            {
                "id": "twins.reported_p99_ms",
                "value": results["reported"].get("p99_ms"),
                "target": 500,
                "unit": f"ms (edge report -> Device status in a watch; {scope})",
                "op": "<=",
            },
        ],
    }
