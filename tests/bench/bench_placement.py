"""Placement benchmark: a 10,000-node fleet, from scratch and reacting to an outage.

The fleet: 10,000 nodes in 100 sites of 100 nodes, 10 sites per region; every
tenth node has a GPU (``nvidia.com/gpu: 1``), every fiftieth is tainted
``dedicated=infra:NoSchedule``, half the nodes are arm64. Allocatable 4 CPUs,
8 GiB, 110 pods. 1,000 placements, 100,000 replicas in all:

- 10 PerNode placements, one per region (the tainted nodes excluded),
- 90 fleet-wide placements spread evenly over the 100 sites (groups by site),
- 600 regional placements spread over the region's 10 sites, some weighted,
  some with maxSkew, some asking for a GPU,
- 300 site-local placements with no groups, pinned to arm64 or not,

with the replica counts of the Replicas placements sized so that the total
is exactly 100,000. Requests 10-50 millicores and 16-64 MiB; priorities 0-3.

Measured (computation only: no API, pods are not rendered to JSON):

- ``placement.full_s``: feed the 10,000 nodes and 1,000 placements to a new
  Planner (Node and EdgePlacement JSON parsed) and compute the first plan.
- ``placement.react_100_offline_ms``: 100 random nodes go offline; the time to
  record that, plan at once (status only: within the tolerance nothing moves)
  and plan again once their tolerance has expired (the failover of their
  replicas to other nodes of the same site). Median of 5 rounds, each with
  100 nodes not picked before (they come back between rounds).

``full_s`` is the median of 3 runs. The machine these run on is shared, so
wall-clock figures are noisy; the reaction's CPU time is reported too.

Through the real hub (``hub_*`` results, no goal): a hub on its embedded API with the
placement extension, four simulated agents over loopback WebSocket with real
certificates (in the benchmark's process: four agents cost nothing worth a process), a
placement of 2 replicas over 3 nodes of a site with ``offlineTolerationSeconds: 1``.
Each round cuts the link of a node holding a replica (no close, the agent stays away)
and times the cut → the replacement pod seen by a watch; minus the 1 s tolerance, that
is the hub's reaction (the session end noticed, the deadline, the plan, the create).
Then the node comes back and the surplus goes before the next round.

Before the reaction, every planned pod is fed back as the API and the agents
would report it (created, Running, Ready), so the reaction updates real
readiness. Also reported: the plan alone, the plan when the nodes have just
gone offline (status only), how long rendering every created pod to JSON
takes (what the controller pays while writing, rate-limited), and the sizes.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import statistics
import time
from collections import Counter
from typing import Any

from cloudhub.placement import Planner, parse_placement

T0 = 1_700_000_000.0


def _fleet(sites: int, nodes_per_site: int) -> list[dict[str, Any]]:
    out = []
    for s in range(sites):
        for i in range(nodes_per_site):
            n = s * nodes_per_site + i
            labels = {
                "site": f"s{s:03d}",
                "region": f"r{s // 10:02d}",
                "kubernetes.io/arch": "arm64" if n % 2 else "amd64",
                "node-role.kubernetes.io/edge": "",
            }
            alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
            if n % 10 == 0:
                labels["gpu"] = "true"
                alloc["nvidia.com/gpu"] = "1"
            taints = []
            if n % 50 == 7:
                taints.append({"key": "dedicated", "value": "infra", "effect": "NoSchedule"})
            out.append(
                {
                    "metadata": {"name": f"edge-{n:05d}", "labels": labels},
                    "spec": {"taints": taints},
                    "status": {"allocatable": alloc},
                }
            )
    return out


def _template(rng: random.Random, gpu: bool = False, arch: str | None = None) -> dict[str, Any]:
    requests = {"cpu": f"{rng.randrange(10, 51)}m", "memory": f"{rng.randrange(16, 65)}Mi"}
    if gpu:
        requests["nvidia.com/gpu"] = "1"
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "image": "registry.local/app:1", "resources": {"requests": requests}}
        ]
    }
    if arch:
        spec["nodeSelector"] = {"kubernetes.io/arch": arch}
    return {"metadata": {"labels": {"app": "bench"}}, "spec": spec}


def _placements(
    rng: random.Random, sites: int, nodes_per_site: int, count: int, total: int
) -> list[dict[str, Any]]:
    regions = max(1, sites // 10)
    specs: list[dict[str, Any]] = []
    per_node = max(1, count // 100)
    for r in range(per_node):
        specs.append(
            {
                "mode": "PerNode",
                "nodeSelector": {"matchLabels": {"region": f"r{r % regions:02d}"}},
                "template": _template(rng),
            }
        )
    fleet_wide = count * 9 // 100
    regional = count * 60 // 100
    local = count - per_node - fleet_wide - regional
    nodes_per_region = nodes_per_site * min(10, sites)
    per_node_replicas = per_node * nodes_per_region * 49 // 50
    budget = total - per_node_replicas
    weights = [2.0] * fleet_wide + [0.8] * regional + [0.8] * local
    scale = budget / sum(weights)
    counts = [max(1, int(w * scale)) for w in weights]
    counts[-1] += budget - sum(counts)
    k = 0
    for _ in range(fleet_wide):
        specs.append(
            {"replicas": counts[k], "groups": {"byLabel": "site"}, "template": _template(rng)}
        )
        k += 1
    for i in range(regional):
        gpu = i % 20 == 3
        region = f"r{(i // 20 if gpu else i) % regions:02d}"
        groups: dict[str, Any] = {"byLabel": "site"}
        if i % 5 == 1:
            first = (i % regions) * 10
            groups = {
                "byLabel": "site",
                "spread": "Weighted",
                "members": [
                    {"value": f"s{first + j:03d}", "weight": 1 + j % 3}
                    for j in range(min(10, sites))
                ],
            }
        elif i % 5 == 2:
            groups["maxSkew"] = 2
        specs.append(
            {
                "replicas": min(counts[k], 30) if gpu else counts[k],
                "nodeSelector": {
                    "matchLabels": {"region": region, **({"gpu": "true"} if gpu else {})}
                },
                "groups": groups,
                "template": _template(rng, gpu=gpu),
            }
        )
        if gpu:
            counts[k + 1] += counts[k] - min(counts[k], 30)
        k += 1
    for i in range(local):
        specs.append(
            {
                "replicas": counts[k],
                "nodeSelector": {"matchLabels": {"site": f"s{i % sites:03d}"}},
                "template": _template(rng, arch="arm64" if i % 3 == 0 else None),
            }
        )
        k += 1
    out = []
    for i, spec in enumerate(specs):
        spec["priority"] = rng.randrange(4)
        out.append(
            {
                "apiVersion": "apps.edgefleet.io/v1alpha1",
                "kind": "EdgePlacement",
                "metadata": {
                    "name": f"p{i:04d}",
                    "namespace": "bench",
                    "uid": f"uid-{i}",
                    "generation": 1,
                    "creationTimestamp": time.strftime(
                        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 - 86400 + i)
                    ),
                },
                "spec": spec,
            }
        )
    return out


def _build(nodes: list[dict], placements: list[dict]) -> tuple[Planner, Any, float, float]:
    t0 = time.perf_counter()
    planner = Planner()
    for node in nodes:
        planner.upsert_node(node, offline_since=None)
    for obj in placements:
        planner.upsert_placement(parse_placement(obj))
    t1 = time.perf_counter()
    plan = planner.plan(T0)
    return planner, plan, t1 - t0, time.perf_counter() - t1


def run(quick: bool) -> dict:
    sites, per_site, count, total = (10, 100, 100, 10_000) if quick else (100, 100, 1000, 100_000)
    repeats, rounds = (1, 3) if quick else (3, 5)
    rng = random.Random(7)
    nodes = _fleet(sites, per_site)
    placements = _placements(rng, sites, per_site, count, total)

    # From scratch, median of `repeats` runs (the machine is shared: noisy).
    builds, build_cpu = [], []
    for _ in range(repeats):
        c0 = time.process_time()
        planner, plan, ingest_s, plan_s = _build(nodes, placements)
        build_cpu.append(time.process_time() - c0)
        builds.append((ingest_s + plan_s, ingest_s, plan_s))
    full_s, ingest_s, plan_s = statistics.median_low(builds)

    # The API acknowledges every pod and the agents report them Running and
    # Ready (not timed): the reaction below then changes real readiness.
    t3 = time.perf_counter()
    rendered = [create.render() for create in plan.creates]
    render_s = time.perf_counter() - t3
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0))
    for i, pod in enumerate(rendered):
        pod["metadata"]["uid"] = f"pod-{i}"
        pod["metadata"]["creationTimestamp"] = stamp
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        planner.upsert_pod(pod)
    del rendered
    settle = planner.plan(T0 + 1)

    # Reaction: `rounds` times, 100 nodes never picked before go offline; time the
    # notice (status only) and the failover once their tolerance expired; then
    # they come back (not timed).
    names = [n["metadata"]["name"] for n in nodes]
    rng.shuffle(names)
    on_node = Counter(c.node for c in plan.creates)
    wall, cpu, notices, failovers, moved, lost = [], [], [], [], [], []
    now = T0 + 60
    for r in range(rounds):
        victims = names[r * 100 : (r + 1) * 100]
        lost.append(sum(on_node[v] for v in victims))
        w0, c0 = time.perf_counter(), time.process_time()
        for name in victims:
            planner.set_connectivity(name, now)
        planner.plan(now)
        w1 = time.perf_counter()
        failover = planner.plan(now + 301)
        w2, c2 = time.perf_counter(), time.process_time()
        wall.append((w2 - w0) * 1000)
        cpu.append((c2 - c0) * 1000)
        notices.append((w1 - w0) * 1000)
        failovers.append((w2 - w1) * 1000)
        moved.append(len(failover.creates))
        for name in victims:
            planner.set_connectivity(name, None)
        planner.plan(now + 302)
        now += 1000
    react_ms = statistics.median(wall)
    hub = asyncio.run(_through_hub(3 if quick else 5))

    return {
        "results": {
            "load_average_1min": round(os.getloadavg()[0], 2),
            "nodes": len(nodes),
            "placements": len(placements),
            "replicas_requested": total,
            "replicas_placed": len(plan.creates),
            "ingest_s": round(ingest_s, 3),
            "plan_s": round(plan_s, 3),
            "full_s": round(full_s, 3),
            "full_s_runs": [round(b[0], 3) for b in builds],
            "full_cpu_s_runs": [round(c, 3) for c in build_cpu],
            "render_all_pods_s": round(render_s, 3),
            "settle_writes_after_ready": len(settle.creates) + len(settle.deletes),
            "offline_nodes_per_round": 100,
            "replicas_on_offline_nodes": lost,
            "failover_creates": moved,
            "react_ms_runs": [round(x, 1) for x in wall],
            "react_cpu_ms_runs": [round(x, 1) for x in cpu],
            "offline_notice_ms_runs": [round(x, 1) for x in notices],
            "failover_plan_ms_runs": [round(x, 1) for x in failovers],
            **hub,
        },
        "goals": [
            {
                "id": "placement.full_s",
                "value": round(full_s, 3),
                "target": 2.0,
                "unit": "s",
                "op": "<=",
            },
            {
                "id": "placement.react_100_offline_ms",
                "value": round(react_ms, 2),
                "target": 100.0,
                "unit": "ms",
                "op": "<=",
            },
        ],
    }


def _more_than(items: dict, count: int) -> bool:
    return len(items) > count


async def _through_hub(rounds: int, tolerance_s: int = 1) -> dict[str, Any]:
    """Link cut → replacement pod created, through a real hub (see the module docstring)."""
    import tempfile

    from cloudhub.hub import Hub
    from cloudhub.kube import NAMESPACES, PODS, Informer, KubeClient
    from cloudhub.placement.controller import EDGEPLACEMENTS
    from cloudhub.placement.extension import placement_extension
    from cloudhub.settings import load_hub_settings
    from tests.sim import SimAgent, default_node_info, node_credentials
    from tests.testpki import make_test_pki

    pki = make_test_pki()
    with tempfile.TemporaryDirectory(prefix="bench-placement-") as tmp:
        settings = load_hub_settings(
            overrides={
                "kube.embedded_data_dir": tmp,
                "kube.embedded_port": 0,
                "listen.quic_host": "127.0.0.1",
                "listen.quic_port": 0,
                "listen.websocket_host": "127.0.0.1",
                "listen.websocket_port": 0,
                "observability.http_host": "127.0.0.1",
                "observability.http_port": 0,
            }
        )
        hub = Hub(
            settings, credentials=pki.server, extensions=[placement_extension(settings.placement)]
        )
        agents: dict[str, SimAgent] = {}
        kube: KubeClient | None = None
        watch_task: asyncio.Task | None = None
        try:
            await hub.start()
            kube = await KubeClient.from_kubeconfig(f"{tmp}/kubeconfig")
            await kube.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}
            )

            def agent(name: str) -> SimAgent:
                info = default_node_info(name)
                info["labels"] = {"site": "s1"}
                a = SimAgent(
                    name,
                    node_credentials(pki.ca, name),
                    websocket_port=hub.websocket_port or 0,
                    transport="websocket",
                    node_info=info,
                )
                a.start()
                agents[name] = a
                return a

            for i in range(4):
                agent(f"n{i}")
            created: dict[str, float] = {}  # pod uid -> when the watch saw it
            changed = asyncio.Event()
            watch = Informer(kube, PODS, namespace="b")

            def seen(kind: str, obj: dict, old: dict | None) -> None:
                created.setdefault(obj["metadata"]["uid"], time.monotonic())
                changed.set()

            watch.add_handler(seen)
            watch_task = asyncio.create_task(watch.run())
            await kube.create(
                EDGEPLACEMENTS,
                {
                    "apiVersion": "apps.edgefleet.io/v1alpha1",
                    "kind": "EdgePlacement",
                    "metadata": {"name": "web", "namespace": "b"},
                    "spec": {
                        "template": {
                            "metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "web", "image": "web:1"}]},
                        },
                        "replicas": 2,
                        "nodeSelector": {"matchLabels": {"site": "s1"}},
                        "offlineTolerationSeconds": tolerance_s,
                    },
                },
                "b",
            )

            def live() -> list[dict]:
                return [p for p in watch.items() if not p["metadata"].get("deletionTimestamp")]

            def steady() -> bool:
                pods = live()
                return (
                    len(pods) == 2
                    and len(watch.items()) == 2
                    and all(
                        any(
                            c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (p.get("status") or {}).get("conditions") or []
                        )
                        for p in pods
                    )
                )

            async def until(predicate, timeout: float = 60.0) -> None:
                async def loop() -> None:
                    while not predicate():
                        changed.clear()
                        await changed.wait()

                await asyncio.wait_for(loop(), timeout)

            reactions = []
            for _ in range(rounds):
                await until(steady)
                known = set(created)
                victim = agents[live()[0]["spec"]["nodeName"]]
                victim.abandon()
                cut = time.monotonic()
                victim.cut()
                count = len(known)
                await until(functools.partial(_more_than, created, count))
                new = set(created) - known
                reactions.append((min(created[u] for u in new) - cut - tolerance_s) * 1000)
                back = victim.restarted()
                agents[victim.name] = back
                back.start()
            await until(steady)
        finally:
            if watch_task is not None:
                watch_task.cancel()
                await asyncio.gather(watch_task, return_exceptions=True)
            await asyncio.gather(*(a.stop() for a in agents.values()))
            if kube is not None:
                await kube.close()
            await hub.aclose()
    return {
        "hub_failover_after_tolerance_ms_runs": [round(x, 1) for x in reactions],
        "hub_failover_after_tolerance_ms": round(statistics.median(reactions), 1),
        "hub_tolerance_s": tolerance_s,
    }
