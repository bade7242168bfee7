"""Agent upgrade benchmark (issue 19): what exists so far, measured; the rest named.

Measured, on one machine, with real venvs, real pip (no index) and the real start guard:

- ``upgrade.node_s``: one node, the artifact already in its cache: the order handed to
  the agent's UpgradeManager → the new venv built beside the running one, smoke-tested,
  switched → the guard lets the new agent start → it reports Restarted after the welcome →
  the hub's Rollout counts it Healthy. The restart itself is the process manager's (not
  timed: no systemd here) and the wheel is the tests' stand-in ``edgefleet`` (a few KiB,
  no dependencies to copy but the venv's own pip and setuptools).
- ``upgrade.rollback_s``: the new agent crashes at every start: the guard script (run as
  the unit's ExecStartPre would, by the system's Python) counts the starts, puts the
  previous venv back at the one past ``max_attempts`` (3), and the previous agent reports
  RolledBack. systemd's RestartSec between the crashes is not included.
- ``upgrade.hub_cpu_s_per_node``: the hub's rollout state machine driving a fleet
  (1,000 nodes, or 100 with ``--quick``) through a whole rollout in batches of 10 %: every
  node's reports and its return with the new version fed in, a controller step after each
  change; process CPU seconds per node. The sessions, the artifact transfer and the API
  writes are not included (they are in the hub integration test, not timed here). The
  issue sets no target; 0.05 s per node is this benchmark's own bound.

- ``upgrade.fleet_1000_s`` and ``upgrade.pod_restarts`` (tests/bench/upgrade_fleet.py):
  1,000 nodes: 997 simulated (17 with ``--quick``; the figure is then not the goal's) and
  3 real agents installed by deploy/install.sh, one EdgeUpgrade in batches of 10 %, the
  artifact (this tree's wheel with the next version) served by the hub over the
  sessions; from the resource's creation to Completed. The simulated nodes fetch and
  check the artifact and reconnect with the new version but build no venv; the real
  agents build, switch and restart for real under the unit's stand-in. The pod restarts
  are the real agents' pods': two on the process runtime, one on the docker runtime
  (podman's Docker API; ``pod_restarts_process`` and ``pod_restarts_docker``).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import tempfile
import time

from cloudhub.upgrade import NodeFacts, NodePhase, Rollout, parse_spec
from edgeagent.upgrade import ArtifactCache, Layout, UpgradeManager, guard
from protocol.upgrade import UpgradeOrder
from tests.bench.upgrade_fleet import fleet_run
from tests.edgeagent.upgrade.wheels import copy_venv, make_venv, make_wheel, sha256


def _children_cpu() -> float:
    """CPU seconds of finished child processes (pip, the smoke test, the guard)."""
    times = os.times()
    return times.children_user + times.children_system


async def _noop_fetch(*_args):  # the artifact is cached: never called
    raise AssertionError("the artifact should have been cached")


def _agent(state: pathlib.Path, prefix: pathlib.Path, reports: list, restarts: list):
    async def report(progress) -> None:
        reports.append(progress)

    async def restart() -> None:
        restarts.append(time.perf_counter())

    layout = Layout(prefix)
    return UpgradeManager(
        state,
        layout,
        ArtifactCache(state / "upgrade" / "artifacts", budget=64 << 20),
        running_version=layout.version(),
        fetch=_noop_fetch,
        report=report,
        restart=restart,
        max_attempts=3,
    )


def _cache(state: pathlib.Path, wheel: pathlib.Path) -> str:
    digest = sha256(wheel)
    cache = ArtifactCache(state / "upgrade" / "artifacts", budget=64 << 20)
    data = wheel.read_bytes()
    cache.append(digest, 0, data, len(data))
    cache.complete(digest, wheel.name)
    return digest


def _order(wheel: pathlib.Path, digest: str, version: str) -> UpgradeOrder:
    return UpgradeOrder(
        upgrade="bench",
        uid="u-bench",
        version=version,
        sha256=digest,
        artifact=wheel.name,
        size=wheel.stat().st_size,
        gate_s=120.0,
    )


async def _one_node(root: pathlib.Path, template: pathlib.Path, crash: bool) -> dict:
    prefix = root / "opt" / "edgeagent"
    prefix.parent.mkdir(parents=True)
    copy_venv(template, prefix)
    state = root / "state"
    wheel = make_wheel(root, "0.5.0")
    digest = _cache(state, wheel)
    spec = parse_spec({"version": "0.5.0", "artifact": {"sha256": digest, "name": wheel.name}})
    rollout = Rollout(spec)
    rollout.step({"n": NodeFacts("n", True, "0.4.0")}, time.time())
    reports: list = []
    restarts: list = []
    wall0, cpu0, kids0 = time.perf_counter(), time.process_time(), _children_cpu()
    assert (
        await _agent(state, prefix, reports, restarts).handle_order(_order(wheel, digest, "0.5.0"))
        == "restarting"
    )
    switched = time.perf_counter()
    if crash:
        script = state / "upgrade" / "guard.py"
        base = shutil.which("python3") or "python3"
        while True:
            proc = await asyncio.create_subprocess_exec(
                base, "-I", str(script), str(state), stderr=asyncio.subprocess.PIPE
            )
            _, err = await proc.communicate()
            if b"rolled back" in err:
                break
        back = _agent(state, prefix, reports, restarts)
        await back.on_connected()
        assert reports[-1].phase == "RolledBack" and back.running_version == "0.4.0"
        return {
            "rollback_s": time.perf_counter() - switched,
            "rollback_cpu_s": time.process_time() - cpu0,
            "rollback_children_cpu_s": _children_cpu() - kids0,
        }
    assert guard.on_start(state, time.time()) == "probation"
    new = _agent(state, prefix, reports, restarts)
    await new.on_connected()
    for progress in reports:
        rollout.report("n", NodePhase(progress.phase), progress.observed_at)
    rollout.step({"n": NodeFacts("n", True, new.running_version)}, time.time())
    assert rollout.nodes["n"].phase is NodePhase.HEALTHY
    return {
        "node_s": time.perf_counter() - wall0,
        "node_cpu_s": time.process_time() - cpu0,
        "node_children_cpu_s": _children_cpu() - kids0,
        "switch_s": switched - wall0,
    }


def _fleet(count: int) -> dict:
    spec = parse_spec(
        {"version": "0.5.0", "artifact": {"sha256": "ab" * 32, "name": "a-1-py3-none-any.whl"}}
    )
    rollout = Rollout(spec)
    facts = {f"n{i:05d}": NodeFacts(f"n{i:05d}", True, "0.4.0") for i in range(count)}
    now = 1_700_000_000.0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    steps = 0
    while rollout.phase()[0].value != "Completed":
        for action in rollout.step(facts, now):
            for phase in (NodePhase.DOWNLOADING, NodePhase.DOWNLOADED, NodePhase.INSTALLING):
                rollout.report(action.node, phase, now)
            facts[action.node] = NodeFacts(action.node, True, "0.5.0")
        rollout.to_status(1)
        steps += 1
        now += 1.0
    cpu = time.process_time() - cpu0
    return {
        "fleet_nodes": count,
        "fleet_steps": steps,
        "fleet_state_machine_wall_s": time.perf_counter() - wall0,
        "fleet_state_machine_cpu_s": cpu,
        "hub_cpu_s_per_node": cpu / count,
    }


def run(quick: bool) -> dict:
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-upgrade-") as tmp:
        root = pathlib.Path(tmp)
        template = root / "template" / "edgeagent"
        template.parent.mkdir()
        make_venv(template, make_wheel(root / "template", "0.4.0"))
        results.update(asyncio.run(_one_node(root / "node", template, crash=False)))
        results.update(asyncio.run(_one_node(root / "crash", template, crash=True)))
    results.update(_fleet(100 if quick else 1000))
    with tempfile.TemporaryDirectory(prefix="bench-upgrade-fleet-") as tmp:
        fleet = asyncio.run(fleet_run(pathlib.Path(tmp), 17 if quick else 997))
    results.update(fleet)
    results["scale"] = (
        "quick: 17 simulated + 3 real nodes" if quick else "1,000 nodes: 997 simulated + 3 real"
    )
    return {
        "results": results,
        "goals": [
            {"id": "upgrade.node_s", "value": results["node_s"], "target": 20, "unit": "s"},
            {"id": "upgrade.rollback_s", "value": results["rollback_s"], "target": 30, "unit": "s"},
            {
                "id": "upgrade.pod_restarts",
                "value": results["pod_restarts"],
                "target": 0,
                "unit": "restarts",
            },
            {"id": "upgrade.fleet_1000_s", "value": results["fleet_s"], "target": 300, "unit": "s"},
            {
                "id": "upgrade.hub_cpu_s_per_node",
                "value": results["hub_cpu_s_per_node"],
                "target": 0.05,
                "unit": "s",
            },
        ],
    }
