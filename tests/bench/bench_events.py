"""Events over many reconnects: how many Event objects the hub leaves, how the API grows.

Set-up: the embedded API in a process of its own (``python -m cloudhub.standalone
--in-memory``, default event TTL: 1 h, so nothing expires during the run), ``python -m
cloudhub serve`` against it (Node writes at 1,000/s so that registration does not pace the
rounds), and simulated agents (:mod:`tests.sim`) in this process over WebSocket.

One *round*: every agent connects and syncs, then every agent stops (a clean close), and
the hub reports no session. After each round the Events in the API are counted and the API
process's RSS read. At the end the count is read again once the hub's Event writes have
settled (the count unchanged over three reads a second apart).

Figures: Event objects per node after all rounds (two per session before the correlator:
``EdgeConnected`` and ``EdgeDisconnected``; one of each per node with it, counting), their
JSON bytes, the API's RSS growth per round over the second half of the rounds (the API
runs with ``--watch-history 2000`` so that its bounded watch history is full by then: what
still grows is what the rounds leave behind), and CPU seconds of the API and hub processes
over the rounds. The goal's margin (64 KiB a round, ~13 KiB a node) is for allocator noise
on a shared machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cloudhub.kube import EVENTS, KubeClient  # noqa: E402
from tests.bench.bench_hub import Stack, _cpu_seconds, _progress, _total  # noqa: E402
from tests.sim import SimAgent, node_credentials  # noqa: E402
from tests.testpki import make_test_pki  # noqa: E402

FULL = {"nodes": 50, "rounds": 120}
QUICK = {"nodes": 5, "rounds": 4}
GOALS = {"objects_per_node": 2.0, "rss_kib_per_round": 64.0}
# The API keeps this many changes for watches (default 10,000): at ~50 changes a round
# (each node's Events) the default would take ~200 rounds to fill; 2,000 fills in the
# first ~40, so the second half shows what grows with the rounds themselves.
WATCH_HISTORY = 2000
DEADLINE_S = 120.0


async def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def _event_count(kube: KubeClient) -> int:
    items, _ = await kube.list(EVENTS, "default")
    return len(items)


async def _event_bytes(kube: KubeClient) -> int:
    items, _ = await kube.list(EVENTS, "default")
    return sum(len(json.dumps(item, separators=(",", ":"))) for item in items)


async def _settled_count(kube: KubeClient) -> int:
    seen: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < 3 or len(set(seen[-3:])) != 1:
        if time.monotonic() > deadline:
            break
        seen.append(await _event_count(kube))
        await asyncio.sleep(1.0)
    return seen[-1]


async def run_async(quick: bool) -> dict:
    plan = QUICK if quick else FULL
    test_pki = make_test_pki()
    with tempfile.TemporaryDirectory(prefix="bench-events-") as tmp:
        stack = Stack(
            pathlib.Path(tmp),
            test_pki,
            ["--nodes-qps", "1000", "--nodes-burst", "1000"],
            api_flags=("--watch-history", str(WATCH_HISTORY)),
        )
        await stack.start()
        kube = await KubeClient.from_kubeconfig(str(stack.kubeconfig))
        agents = [
            SimAgent(
                f"flap-{i}",
                node_credentials(test_pki.ca, f"flap-{i}"),
                host="127.0.0.1",
                quic_port=stack.port,
                websocket_port=stack.port,
                transport="websocket",
            )
            for i in range(plan["nodes"])
        ]
        try:
            api_cpu_0, hub_cpu_0 = _cpu_seconds(stack.api_ps), _cpu_seconds(stack.hub_ps)
            started = time.monotonic()
            rounds: list[dict[str, Any]] = []
            for n in range(1, plan["rounds"] + 1):
                for agent in agents:
                    agent.start()

                async def synced() -> bool:
                    return all(agent.synced for agent in agents)

                await _until(synced, f"round {n}: every agent synced")
                await asyncio.gather(*(agent.stop() for agent in agents))

                async def gone() -> bool:
                    return _total(await stack.metrics(), "edgefleet_hub_connected_nodes") == 0

                await _until(gone, f"round {n}: no session left")
                rounds.append(
                    {
                        "round": n,
                        "events": await _event_count(kube),
                        "api_rss_kib": stack.api_ps.memory_info().rss / 1024,
                    }
                )
                _progress("round", **rounds[-1])
            wall = time.monotonic() - started
            api_cpu, hub_cpu = _cpu_seconds(stack.api_ps) - api_cpu_0, _cpu_seconds(stack.hub_ps)
            hub_cpu -= hub_cpu_0
            events = await _settled_count(kube)
            event_bytes = await _event_bytes(kube)
        finally:
            await asyncio.gather(*(agent.stop() for agent in agents))
            await kube.close()
            await stack.stop()
    half = rounds[len(rounds) // 2 - 1 :]
    growth = (half[-1]["api_rss_kib"] - half[0]["api_rss_kib"]) / max(len(half) - 1, 1)
    return {
        "setup": (
            f"{plan['nodes']} simulated agents (WebSocket) connect, sync and stop, "
            f"{plan['rounds']} rounds; hub (python -m cloudhub serve) and embedded API "
            "(python -m cloudhub.standalone --in-memory) each in a process of its own"
        ),
        "cpus": os.cpu_count(),
        "nodes": plan["nodes"],
        "rounds_run": plan["rounds"],
        "sessions": plan["nodes"] * plan["rounds"],
        "events": events,
        "objects_per_node": events / plan["nodes"],
        "event_kib": round(event_bytes / 1024, 1),
        "api_rss_kib_per_round_second_half": round(growth, 1),
        "api_rss_first_round_kib": round(rounds[0]["api_rss_kib"]),
        "api_rss_last_round_kib": round(rounds[-1]["api_rss_kib"]),
        "wall_s": round(wall, 1),
        "api_cpu_s": round(api_cpu, 2),
        "hub_cpu_s": round(hub_cpu, 2),
        "per_round": rounds,
    }


def run(quick: bool) -> dict:
    results = asyncio.run(run_async(quick))
    return {
        "results": results,
        "goals": [
            {
                "id": "events.objects_per_node",
                "value": results["objects_per_node"],
                "target": GOALS["objects_per_node"],
                "unit": "Event objects per node",
                "op": "<=",
            },
            {
                "id": "events.api_rss_kib_per_round",
                "value": results["api_rss_kib_per_round_second_half"],
                "target": GOALS["rss_kib_per_round"],
                "unit": "KiB per round",
                "op": "<=",
            },
        ],
    }
