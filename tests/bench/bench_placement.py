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
  record that and compute the plan once their tolerance has expired (the
  failover of their replicas to other nodes of the same site).

Also reported: the plan alone, the plan when the nodes have just gone offline
(status only), how long rendering every created pod to JSON takes (what the
controller pays while writing, rate-limited), and the sizes.
"""

from __future__ import annotations

import random
import time
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
        region = f"r{i % regions:02d}"
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
        gpu = i % 20 == 3
        specs.append(
            {
                "replicas": min(counts[k], 90) if gpu else counts[k],
                "nodeSelector": {
                    "matchLabels": {"region": region, **({"gpu": "true"} if gpu else {})}
                },
                "groups": groups,
                "template": _template(rng, gpu=gpu),
            }
        )
        if gpu:
            counts[k + 1] += counts[k] - min(counts[k], 90)
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


def run(quick: bool) -> dict:
    sites, per_site, count, total = (10, 100, 100, 10_000) if quick else (100, 100, 1000, 100_000)
    rng = random.Random(7)
    nodes = _fleet(sites, per_site)
    placements = _placements(rng, sites, per_site, count, total)

    t0 = time.perf_counter()
    planner = Planner()
    for node in nodes:
        planner.upsert_node(node, offline_since=None)
    for obj in placements:
        planner.upsert_placement(parse_placement(obj))
    t1 = time.perf_counter()
    plan = planner.plan(T0)
    t2 = time.perf_counter()
    full_s = t2 - t0

    t3 = time.perf_counter()
    for create in plan.creates:
        create.render()
    render_s = time.perf_counter() - t3

    victims = rng.sample([n["metadata"]["name"] for n in nodes], 100)
    on_victims = sum(1 for c in plan.creates if c.node in set(victims))
    now = T0 + 60
    r0 = time.perf_counter()
    for name in victims:
        planner.set_connectivity(name, now)
    notice = planner.plan(now)
    r1 = time.perf_counter()
    failover = planner.plan(now + 301)
    r2 = time.perf_counter()
    react_ms = ((r1 - r0) + (r2 - r1)) * 1000

    placed = len(plan.creates)
    return {
        "results": {
            "nodes": len(nodes),
            "placements": len(placements),
            "replicas_requested": total,
            "replicas_placed": placed,
            "ingest_s": round(t1 - t0, 3),
            "plan_s": round(t2 - t1, 3),
            "full_s": round(full_s, 3),
            "render_all_pods_s": round(render_s, 3),
            "offline_nodes": len(victims),
            "replicas_on_offline_nodes": on_victims,
            "offline_notice_ms": round((r1 - r0) * 1000, 2),
            "failover_plan_ms": round((r2 - r1) * 1000, 2),
            "failover_creates": len(failover.creates),
            "failover_deletes": len(failover.deletes),
            "statuses_changed_on_notice": len(notice.statuses),
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
