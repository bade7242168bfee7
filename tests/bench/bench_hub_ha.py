"""Benchmark ``hub_ha``: three hub replicas sharing one simulated fleet (issue 18).

Processes, all separate from this one: the embedded API (``python -m cloudhub.standalone
--in-memory``, as a cluster's API would be), three ``cloudhub serve`` replicas with
``ha.enabled`` and production HA and node intervals (replica Leases 6 s renewed every 2 s,
node Leases renewed every 32 s ± 5 % with a 40 s duration, Ready heartbeats every 10 min,
40 s grace: the defaults), and simulated agents (``python -m tests.sim
--no-status``, idle) over WebSocket through a round-robin TCP balancer in this process
standing in for the Service. Phases:

1. idle: API writes per node per minute over a window (the replicas' own counters of the
   writes they made about nodes, plus their replica Lease renewals);
2. replica death: SIGKILL of the replica holding the most nodes; seconds until every one
   of its nodes is owned by a live replica again (claimed: served);
3. rolling upgrade: each replica in turn SIGTERMed and started again; Nodes seen with
   Ready other than True (from a watch), and nodes whose Lease went unrenewed longer than
   the grace after which a placement fails over (``nodes.not_ready_grace``, 40 s);
4. reconnect storm: every replica SIGKILLed and started again at once; seconds until every
   node is owned and its Lease renewed again, and false failovers as above.

Hub CPU seconds (user + system of the three replica processes) are reported beside each
phase's wall time. ``--quick`` runs 60 nodes and short windows; the full run 1,000 nodes
(the storm goal names 10,000: the figure at 1,000 is reported as measured, not projected).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from cloudhub.errors import KubeConflict  # noqa: E402
from cloudhub.ha import owner_of  # noqa: E402
from cloudhub.kube import CRDS, LEASES, NAMESPACES, NODES, Informer, KubeClient  # noqa: E402
from cloudhub.kube.times import parse_time  # noqa: E402
from protocol import pki  # noqa: E402
from tests.bench.apiproc import cancel_on_sigterm, popen, start_api, stop_api  # noqa: E402
from tests.bench.fds import ensure_open_files  # noqa: E402
from tests.bench.profiles import node_profile  # noqa: E402
from tests.cloudhub.ha.processes import BalancerProcesses, ReplicaProcess  # noqa: E402
from tests.crds import crd_documents  # noqa: E402
from tests.testpki import make_test_pki  # noqa: E402
from tests.waiting import eventually  # noqa: E402

NAMESPACE = "edgefleet-ha"
REPLICAS = 3
GRACE_S = 40.0  # nodes.not_ready_grace: the offline time after which placements fail over
FLAGS = (
    "--observability-log-level", "warning",
    "--listen-backlog", "4096",
    # every simulated node arrives from 127.0.0.1 through the balancer; the default (256
    # handshakes in flight per source) is for a NAT address, and dropped the 10,000-node
    # ramp's connections into the agents' back-off (the fleet not served in 600 s)
    "--listen-max-pending-handshakes-per-source", "4096",
)  # fmt: skip
#: Replica Lease writes per second of the three replicas (one every 2 s each).
REPLICA_LEASE_WRITES_PER_S = REPLICAS / 2.0


def _progress(what: str, **figures: Any) -> None:
    print(f"bench_hub_ha: {what} {json.dumps(figures)}", file=sys.stderr, flush=True)


def _cpu(replicas: list[ReplicaProcess]) -> float:
    total = 0.0
    for r in replicas:
        if r.proc is not None and r.proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                t = psutil.Process(r.proc.pid).cpu_times()
                total += t.user + t.system
    return total


def _ready(node: dict) -> str:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") or ""
    return ""


class Watch:
    """Nodes seen not Ready, and the longest gap between renewals of each node's Lease."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.not_ready: set[str] = set()
        self.renewed: dict[str, float] = {}  # node -> renewTime (epoch s)
        self.owner: dict[str, str] = {}
        self.longest_gap: dict[str, float] = {}

    def reset(self) -> None:
        self.not_ready.clear()
        self.longest_gap.clear()

    def on_node(self, event: str, node: dict, old: dict | None) -> None:
        name = node["metadata"]["name"]
        if name.startswith(self.prefix) and event != "DELETED" and _ready(node) != "True":
            if _ready(old or {}) == "True":  # a Ready node that stopped being Ready
                self.not_ready.add(name)

    def on_lease(self, event: str, lease: dict, old: dict | None) -> None:
        name = lease["metadata"]["name"]
        if not name.startswith(self.prefix):
            return
        self.owner[name] = owner_of(lease)
        at = parse_time((lease.get("spec") or {}).get("renewTime"))
        if at is None:
            return
        before = self.renewed.get(name)
        if before is not None and at > before:
            gap = at - before
            self.longest_gap[name] = max(self.longest_gap.get(name, 0.0), gap)
        self.renewed[name] = at

    def served_by(self, live: set[str], n: int, since: float = 0.0) -> bool:
        """Every one of the ``n`` nodes owned by a live replica, renewed after ``since``."""
        owned = [
            name
            for name, owner in self.owner.items()
            if owner in live and self.renewed.get(name, 0.0) >= since
        ]
        return len(owned) >= n

    def counts(self, live: set[str]) -> dict[str, int]:
        """Nodes with a Lease, and owned by a live replica (for progress lines)."""
        owned = sum(1 for owner in self.owner.values() if owner in live)
        return {"leases": len(self.owner), "owned_by_live": owned}

    def false_failovers(self, grace: float = GRACE_S) -> int:
        return sum(1 for gap in self.longest_gap.values() if gap > grace)


async def _until(check: Any, timeout: float, what: str, state: Any = None) -> float:
    """Seconds until ``check()`` holds (sampled every 50 ms: this is what is measured);
    ``state()``, if given, is printed every 30 s meanwhile and in the failure."""
    start = time.monotonic()

    async def report() -> None:
        while True:
            await asyncio.sleep(30)  # a progress line's pace, not a wait for a condition
            _progress(f"waiting for {what}", seconds=round(time.monotonic() - start), **state())

    reporter = asyncio.create_task(report()) if state is not None else None
    try:
        await eventually(check, what, timeout, interval=0.05, state=state)
    finally:
        if reporter is not None:
            reporter.cancel()
    return time.monotonic() - start


def _metric(port: int, name: str) -> dict[tuple, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[tuple, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


WRITTEN = ("created", "updated", "renewed", "written")


def _writes_by_what(replicas: list[ReplicaProcess]) -> dict[str, float]:
    """Writes about nodes the replicas made (created, updated, renewed, written), by what
    was written (``node``, ``lease``, ``heartbeat``, ``event``, ``unknown``)."""
    out: dict[str, float] = {}
    for r in replicas:
        for labels, value in _metric(r.http_port, "edgefleet_hub_node_writes_total").items():
            found = dict(labels)
            if found.get("result") in WRITTEN:
                what = found.get("what", "")
                out[what] = out.get(what, 0.0) + value
    return out


async def _registrations_done(replicas: list[ReplicaProcess], quiet_s: float = 3.0) -> float:
    """Seconds until the one-time writes of a fleet's arrival (Node creates and updates,
    their Events, through the 50/s Node-write limiter) have stopped: no such write for
    ``quiet_s`` seconds (Lease renewals and heartbeats go on; they are the idle load)."""
    start = time.monotonic()
    last: dict[str, float] = {}
    since = time.monotonic()

    def quiet() -> bool:
        nonlocal last, since
        now = _writes_by_what(replicas)
        arrival = {k: v for k, v in now.items() if k in ("node", "event")}
        if arrival != last:
            last, since = arrival, time.monotonic()
        return time.monotonic() - since >= quiet_s

    await eventually(quiet, "the fleet's registrations written", 300, interval=0.5)
    return time.monotonic() - start


def _keep_logs(root: pathlib.Path, keep: str) -> None:
    """Copy the replicas' and the fleet's logs to ``keep`` (if set), for a look afterwards."""
    if not keep:
        return
    import shutil

    pathlib.Path(keep).mkdir(parents=True, exist_ok=True)
    for log in root.glob("**/*.log"):
        shutil.copy(log, pathlib.Path(keep) / f"{log.parent.name}-{log.name}")


SIMS_PER_PROCESS = 2500
"""Simulated agents per ``tests.sim`` process (prefixes ``ha-0-``, ``ha-1-``, ...)."""


def _balancers(n: int) -> int:
    """Balancer processes for ``n`` nodes: one per 4,000, each holding two sockets per node
    it carries (the kernel's hash spreads connections unevenly: room for twice the mean
    under a 20,000-file limit)."""
    return max(1, -(-n // 4000))


def _fleet_size(quick: bool) -> int:
    """60 nodes (``--quick``), 1,000, or ``EDGEFLEET_BENCH_HA_NODES`` (e.g. 10000 for the
    storm goal's size).

    Raises:
        SystemExit: not a positive integer.
    """
    text = os.environ.get("EDGEFLEET_BENCH_HA_NODES", "")
    if not text:
        return 60 if quick else 1000
    if not text.isdigit() or int(text) < 1:
        raise SystemExit(f"EDGEFLEET_BENCH_HA_NODES={text!r}: not a positive integer")
    return int(text)


async def run_async(quick: bool) -> dict:
    n = _fleet_size(quick)
    cancel_on_sigterm()
    ensure_open_files(n + 4096)  # the sims and replicas inherit it (a socket per node)
    patience = max(300.0, 0.06 * n)  # seconds any phase may take before the run fails
    idle_s = 25.0 if quick else 60.0
    pki_ca = make_test_pki()
    prefix = "ha-"
    with tempfile.TemporaryDirectory(prefix="bench-hub-ha-") as tmp:
        root = pathlib.Path(tmp)
        api, kubeconfig = await start_api(root)
        kube = await KubeClient.from_kubeconfig(str(kubeconfig))
        replicas: list[ReplicaProcess] = []
        sims: list[subprocess.Popen] = []
        tasks: list[asyncio.Task] = []
        try:
            for name in ("edgefleet", "kube-node-lease", NAMESPACE):
                with contextlib.suppress(KubeConflict):
                    await kube.create(NAMESPACES, {"metadata": {"name": name}})
            for crd in crd_documents():
                with contextlib.suppress(KubeConflict):
                    await kube.create(CRDS, crd)
            watch = Watch(prefix)
            nodes = Informer(kube, NODES)
            leases = Informer(kube, LEASES, namespace=NAMESPACE)
            nodes.add_handler(watch.on_node)
            leases.add_handler(watch.on_lease)
            tasks = [asyncio.create_task(i.run()) for i in (nodes, leases)]
            chosen = node_profile()
            profile, grace = chosen.name, chosen.grace
            idle_s = chosen.window(idle_s)
            flags = FLAGS + chosen.flags
            replicas = [
                ReplicaProcess(
                    root / f"hub-{i}", pki_ca, str(kubeconfig), f"hub-{i}", NAMESPACE, flags
                )
                for i in range(REPLICAS)
            ]
            await asyncio.gather(*(asyncio.to_thread(r.start) for r in replicas))
            live = {r.identity for r in replicas}
            ports = [r.port for r in replicas]
            async with BalancerProcesses(ports, _balancers(n)) as balancer:
                (root / "ca.crt").write_bytes(pki.dump_certificate_pem(pki_ca.ca.certificate))
                (root / "ca.key").write_bytes(pki.dump_private_key_pem(pki_ca.ca.private_key))
                for k, start in enumerate(range(0, n, SIMS_PER_PROCESS)):
                    sims.append(
                        popen(
                            [
                                sys.executable, "-m", "tests.sim",
                                "--ca-cert", str(root / "ca.crt"),
                                "--ca-key", str(root / "ca.key"),
                                "--nodes", str(min(SIMS_PER_PROCESS, n - start)),
                                "--prefix", f"{prefix}{k}-",
                                "--transport", "websocket",
                                "--websocket-port", str(balancer.port),
                                "--ramp", "100",
                                "--no-status",
                            ],
                            stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL,
                            stderr=(root / f"sim-{k}.log").open("wb"),
                        )
                    )  # fmt: skip
                # the ramp mints a certificate per node and, on 2 cores, shares them with
                # the sims, balancers and replicas: 10,000 nodes came at ~12/s (not served
                # in 600 s, 2026-12-03), so it may take n / 10 s before the run fails
                ramp_s = await _until(
                    lambda: watch.served_by(live, n), max(patience, n / 10), "the fleet served",
                    state=lambda: watch.counts(live),
                )  # fmt: skip
                _progress("fleet served", nodes=n, seconds=round(ramp_s, 1))
                results: dict[str, Any] = {
                    "nodes": n,
                    "replicas": REPLICAS,
                    "ramp_s": ramp_s,
                    "node_profile": profile,
                }

                # 1. idle writes, once the arrival's writes are over
                results["registrations_s"] = await _registrations_done(replicas)
                k0 = _writes_by_what(replicas)
                w0, c0, t0 = sum(k0.values()), _cpu(replicas), time.monotonic()
                await asyncio.sleep(idle_s)  # the measurement window itself
                k1 = _writes_by_what(replicas)
                w1, c1, t1 = sum(k1.values()), _cpu(replicas), time.monotonic()
                minutes = (t1 - t0) / 60
                replica_lease_writes = REPLICA_LEASE_WRITES_PER_S * (t1 - t0)
                per_node_min = (w1 - w0 + replica_lease_writes) / n / minutes
                node_per_min = (w1 - w0) / n / minutes
                results["idle"] = {
                    "window_s": t1 - t0,
                    "node_writes": w1 - w0,
                    "replica_lease_writes": replica_lease_writes,
                    "writes_per_node_per_min": per_node_min,
                    "node_writes_per_node_per_min": node_per_min,
                    "node_writes_per_node_per_min_by_what": {
                        what: (k1.get(what, 0.0) - k0.get(what, 0.0)) / n / minutes
                        for what in sorted(k1)
                    },
                    # the replica Leases are per replica, not per node: what they add per
                    # node at the goals' sizes
                    "writes_per_node_per_min_at_1000": node_per_min
                    + REPLICA_LEASE_WRITES_PER_S * 60 / 1000,
                    "writes_per_node_per_min_at_10000": node_per_min
                    + REPLICA_LEASE_WRITES_PER_S * 60 / 10_000,
                    "hub_cpu_s": c1 - c0,
                    "hub_cpu_pct_of_one_core": 100 * (c1 - c0) / (t1 - t0),
                    "load_1m": os.getloadavg()[0],
                }
                _progress("idle", **results["idle"])

                # 2. replica death
                counts = {r.identity: 0 for r in replicas}
                for owner in watch.owner.values():
                    if owner in counts:
                        counts[owner] += 1
                victim = max(replicas, key=lambda r: counts[r.identity])
                survivors = [r for r in replicas if r is not victim]
                c0 = _cpu(survivors)
                victim.kill()
                live = {r.identity for r in survivors}
                failover_s = await _until(
                    lambda: watch.served_by(live, n), patience, "the dead replica's nodes served"
                )
                results["failover"] = {
                    "killed": victim.identity,
                    "nodes_moved": counts[victim.identity],
                    "seconds": failover_s,
                    "hub_cpu_s": _cpu(survivors) - c0,
                    "load_1m": os.getloadavg()[0],
                    "not_ready": len(watch.not_ready),
                }
                _progress("failover", **results["failover"])
                await asyncio.to_thread(victim.start)
                live = {r.identity for r in replicas}

                # 3. rolling upgrade
                watch.reset()
                c0, t0 = _cpu(replicas), time.monotonic()
                cpu_stopped = 0.0
                for r in replicas:
                    cpu_stopped += _cpu([r])
                    await asyncio.to_thread(r.stop)
                    others = live - {r.identity}
                    await _until(lambda o=others: watch.served_by(o, n), patience, "handover")
                    await asyncio.to_thread(r.start)
                results["rolling_upgrade"] = {
                    "seconds": time.monotonic() - t0,
                    "not_ready": len(watch.not_ready),
                    "failovers": watch.false_failovers(grace),
                    "longest_lease_gap_s": max(watch.longest_gap.values(), default=0.0),
                    "hub_cpu_s": _cpu(replicas) - c0 + cpu_stopped,
                    "load_1m": os.getloadavg()[0],
                }
                _progress("rolling upgrade", **results["rolling_upgrade"])

                # 4. reconnect storm: every replica at once
                watch.reset()
                for r in replicas:
                    r.kill()
                restarted_at = time.time()
                t0 = time.monotonic()
                await asyncio.gather(*(asyncio.to_thread(r.start) for r in replicas))
                c0 = 0.0  # new processes: their CPU so far is the storm's
                await _until(
                    lambda: watch.served_by(live, n, since=restarted_at), patience, "storm"
                )
                results["reconnect_storm"] = {
                    "seconds": time.monotonic() - t0,
                    "not_ready": len(watch.not_ready),
                    "false_failovers": watch.false_failovers(grace),
                    "longest_lease_gap_s": max(watch.longest_gap.values(), default=0.0),
                    "hub_cpu_s": _cpu(replicas) - c0,
                    "load_1m": os.getloadavg()[0],
                }
                _progress("reconnect storm", **results["reconnect_storm"])
        finally:
            for sim in sims:
                if sim.poll() is None:
                    with contextlib.suppress(OSError):
                        assert sim.stdin is not None
                        sim.stdin.close()
            for sim in sims:
                try:
                    await asyncio.to_thread(sim.wait, 60)
                except subprocess.TimeoutExpired:
                    sim.kill()
            for r in replicas:
                await asyncio.to_thread(r.stop)
            _keep_logs(root, os.environ.get("EDGEFLEET_BENCH_LOGS", ""))
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await kube.close()
            await stop_api(api)
    results["note"] = (
        f"{n} simulated idle WebSocket nodes, 3 replicas, embedded API in its own process, "
        "all on one shared 2-core machine; --quick sizes are a smoke run, not the goals' sizes"
    )
    return results


def run(quick: bool) -> dict:
    results = asyncio.run(run_async(quick))
    storm = results["reconnect_storm"]
    rolling = results["rolling_upgrade"]
    return {
        "results": results,
        "goals": [
            {
                "id": "hub.replica_failover_s",
                "value": round(results["failover"]["seconds"], 2),
                "target": 10,
                "unit": "s",
            },
            {
                "id": "hub.rolling_upgrade_notready",
                "value": rolling["not_ready"],
                "target": 0,
                "unit": "nodes",
            },
            {
                "id": "hub.rolling_upgrade_failovers",
                "value": rolling["failovers"],
                "target": 0,
                "unit": "nodes",
            },
            {
                "id": "hub.reconnect_storm_s",
                "value": round(storm["seconds"], 2),
                "target": 60,
                "unit": "s",
            },
            {
                "id": "hub.reconnect_storm_false_failovers",
                "value": storm["false_failovers"],
                "target": 0,
                "unit": "nodes",
            },
            {
                "id": "hub.api_writes_per_node_per_min",
                "value": round(results["idle"]["writes_per_node_per_min"], 2),
                "target": 2,
                "unit": "writes/node/min",
            },
        ],
    }
