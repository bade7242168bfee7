"""The ``upgrade`` benchmark's fleet run: simulated nodes plus three real agents, one
EdgeUpgrade in batches of 10 %, the artifact served by the hub over the sessions.

- The hub runs in this process with the upgrade extension (its controller every 0.5 s),
  on one port for QUIC and WebSocket, against the embedded API in a process of its own
  (tests/bench/apiproc.py), as a cluster's API would be; its CPU is reported apart
  (``fleet_api_cpu_s``).
- The simulated nodes (:class:`UpgradingSim`, tests/sim's agent over WebSocket) carry
  out the order as the agent's protocol has it: ``upgrade_progress`` Downloading, the
  whole artifact fetched with ``artifact_request``/``artifact_chunk`` and its SHA-256
  checked, Downloaded, Installing, then a "restart": the session dropped and a new one
  whose hello carries the new version. They build no venv.
- The three real agents are installed by deploy/install.sh into roots and run under the
  unit's stand-in (tests/upgrade/installed.py), each with a process-runtime pod; they
  build the new venv, switch and restart for real. ``pod_restarts`` is the sum over their
  pods of restartCount plus the pods whose container id changed.

``fleet_s`` is from the EdgeUpgrade's creation to its phase Completed. The full run is
1,000 nodes in all (997 simulated and the 3 real), so that 10 % makes ten batches of 100. CPU: this
process's CPU seconds over that time (the hub *and* the simulated nodes: they share the
process), and the real new agents' own since they started (their processes' user +
system time, read from /proc at the end; the old agents' and the venv builds' are not
in it). ``BENCH_UPGRADE_TRACE=1`` prints the rollout's phase and its nodes per phase at every poll
on stderr.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import sys
import time

import yaml

from cloudhub.devtools.engine import start_engine, stop_engine
from cloudhub.kube import CRDS, NAMESPACES, NODES, PODS, KubeClient
from cloudhub.upgrade.cli import EDGEUPGRADES
from cloudhub.upgrade.extension import CRD_PATH, UpgradeExtension
from cloudhub.upgrade.settings import UpgradeSettings as HubUpgradeSettings
from edgeagent.upgrade import CHUNK_BYTES
from protocol.errors import CloseCode
from protocol.messages import Message
from protocol.upgrade import ArtifactChunk, ArtifactRequest, UpgradeOrder, UpgradeProgress
from tests.bench.apiproc import api_process
from tests.deploy.wheels import build_wheel
from tests.edgeagent.hublink.fleet import HubRunner, eventually, free_port
from tests.edgeagent.hublink.objects import container_status, get_pod, is_running, pod
from tests.sim.agent import SimAgent
from tests.sim.fleet import node_credentials
from tests.testpki import make_test_pki
from tests.upgrade.installed import Unit, bumped, current_version, install_roots

__all__ = ["UpgradingSim", "fleet_run"]

REAL = ("edge-real-a", "edge-real-b", "edge-real-c")
DOCKER_NODE = REAL[-1]
"""The real agent that runs the docker runtime (the others: the process runtime)."""


class UpgradingSim(SimAgent):
    """A simulated node that carries out ``upgrade_order`` (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.chunks: asyncio.Queue[ArtifactChunk] = asyncio.Queue()
        self.job: asyncio.Task | None = None
        self.failures: list[str] = []

    def _on_message(self, message: Message) -> None:
        if isinstance(message, UpgradeOrder):
            if message.version != self.agent_version and self.job is None:
                self.job = asyncio.get_running_loop().create_task(self._upgrade(message))
            return
        if isinstance(message, ArtifactChunk):
            self.chunks.put_nowait(message)
            return
        super()._on_message(message)

    def _progress(self, order: UpgradeOrder, phase: str, reason: str = "") -> None:
        self.send(
            UpgradeProgress(
                upgrade=order.upgrade,
                uid=order.uid,
                phase=phase,
                version=self.agent_version,
                observed_at=time.time(),
                reason=reason,
            )
        )

    async def _upgrade(self, order: UpgradeOrder) -> None:
        self._progress(order, "Downloading")
        digest, offset = hashlib.sha256(), 0
        while True:
            self.send(ArtifactRequest(sha256=order.sha256, offset=offset, length=CHUNK_BYTES))
            chunk = await asyncio.wait_for(self.chunks.get(), 120)
            if chunk.error or chunk.offset != offset:
                self.failures.append(chunk.error or f"chunk at {chunk.offset}, wanted {offset}")
                self._progress(order, "Failed", "DownloadFailed")
                return
            digest.update(chunk.data)
            offset += len(chunk.data)
            if offset >= chunk.total:
                break
        if digest.hexdigest() != order.sha256:
            self.failures.append("digest mismatch")
            self._progress(order, "Failed", "DigestMismatch")
            return
        self._progress(order, "Downloaded")
        self._progress(order, "Installing")
        # Restart at once, as the agent does: what the hub has not acknowledged yet is
        # sent again on the next session.
        self.agent_version = order.version  # the "new agent" says hello with it
        link = self.link
        if link is not None:  # the old agent stops (a clean close); run() dials again
            await link.close(CloseCode.GOING_AWAY, "agent restarting")


def _agent_cpu(units: dict[str, Unit]) -> float:
    """User + system CPU seconds of the real agents' running processes (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for unit in units.values():
        proc = unit.proc
        if proc is None:
            continue
        try:
            fields = pathlib.Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def fleet_run(work: pathlib.Path, sims: int) -> dict:
    """One rollout over ``sims`` simulated nodes and the three real ones; the figures."""
    old, new = current_version(), bumped(current_version())
    roots = await install_roots(work, REAL)
    artifacts = work / "artifacts"
    artifacts.mkdir()
    next_wheel = await asyncio.to_thread(build_wheel, work / "next", version=new)
    served = artifacts / next_wheel.name
    served.write_bytes(next_wheel.read_bytes())
    digest = hashlib.sha256(served.read_bytes()).hexdigest()
    ca = make_test_pki()
    async with api_process(work) as (api, kubeconfig):
        kube = await KubeClient.from_kubeconfig(str(kubeconfig))
        await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        port = free_port()
        hub = HubRunner(
            kubeconfig,
            ca.server,
            port,
            extensions=lambda settings: [
                UpgradeExtension(
                    HubUpgradeSettings(artifact_dir=str(artifacts), interval=0.5, install_crd=False)
                )
            ],
        )
        await hub.start()
        fleet = [
            UpgradingSim(
                f"sim-{i:04d}",
                node_credentials(ca.ca, f"sim-{i:04d}"),
                websocket_port=port,
                agent_version=old,
            )
            for i in range(sims)
        ]
        # The last real agent runs the docker runtime (podman's Docker API): pod restarts
        # are measured for both runtimes.
        engine = await asyncio.to_thread(start_engine, work / "podman")
        kinds = {n: ("docker" if n == DOCKER_NODE else "process") for n in REAL}
        units = {
            n: Unit(root, n, hub.url, ca.ca, kind=kinds[n], engine=engine)
            for n, root in roots.items()
        }
        try:
            for sim in fleet:
                sim.start()
            for unit in units.values():
                unit.up()
            ns = "bench-upgrade"
            await kube.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
            for n in REAL:
                await kube.create(PODS, pod(f"app-{n}", ns, n, "exec sleep 3600"))

            async def ready() -> bool:
                nodes, _ = await kube.list(NODES)
                pods = [await get_pod(kube, ns, f"app-{n}") for n in REAL]
                return len(nodes) == sims + len(REAL) and all(is_running(p) for p in pods)

            await eventually(ready, "every node registered, the real pods Running", 300)
            before = {
                n: container_status(await get_pod(kube, ns, f"app-{n}"))["containerID"]
                for n in REAL
            }
            spec = {
                "version": new,
                "artifact": {"sha256": digest, "name": served.name},
                "maxUnavailable": "10%",
                "healthGate": {"podsReady": True, "timeoutSeconds": 600},
                "failurePolicy": "Pause",
            }
            cpu0, wall0 = time.process_time(), time.perf_counter()
            api0 = sum(api.cpu_times()[:2])
            await kube.create(
                EDGEUPGRADES,
                {
                    "apiVersion": "apps.edgefleet.io/v1alpha1",
                    "kind": "EdgeUpgrade",
                    "metadata": {"name": "bench"},
                    "spec": spec,
                },
            )

            async def completed() -> dict | None:
                status = (await kube.get(EDGEUPGRADES, "bench")).get("status") or {}
                if os.environ.get("BENCH_UPGRADE_TRACE"):
                    counts: dict[str, int] = {}
                    for entry in status.get("nodes") or ():
                        counts[entry["phase"]] = counts.get(entry["phase"], 0) + 1
                    elapsed = time.perf_counter() - wall0
                    print(f"{elapsed:7.1f} s", status.get("phase"), counts, file=sys.stderr)
                return status if status.get("phase") == "Completed" else None

            status = await eventually(completed, "the rollout Completed", 1800)
            wall = time.perf_counter() - wall0
            cpu = time.process_time() - cpu0
            api_cpu = sum(api.cpu_times()[:2]) - api0
            restarts = {"process": 0, "docker": 0}
            for n in REAL:
                now = container_status(await get_pod(kube, ns, f"app-{n}"))
                restarts[kinds[n]] += int(now.get("restartCount", 0)) + (
                    now["containerID"] != before[n]
                )
            phases: dict[str, int] = {}
            for entry in status.get("nodes") or ():
                phases[entry["phase"]] = phases.get(entry["phase"], 0) + 1
            return {
                "fleet_total_nodes": sims + len(REAL),
                "fleet_simulated_nodes": sims,
                "fleet_real_agents": len(REAL),
                "fleet_batch": "10%",
                "fleet_s": wall,
                "fleet_process_cpu_s": cpu,
                "fleet_api_cpu_s": api_cpu,
                "fleet_real_new_agents_cpu_s": _agent_cpu(units),
                "fleet_node_phases": phases,
                "fleet_sim_failures": sum(len(s.failures) for s in fleet),
                "fleet_artifact_bytes": served.stat().st_size,
                "pod_restarts": sum(restarts.values()),
                "pod_restarts_process": restarts["process"],
                "pod_restarts_docker": restarts["docker"],
                "real_agent_runtimes": [kinds[n] for n in REAL],
                "real_agent_versions": [units[n].starts[-1] for n in REAL],
            }
        finally:
            for unit in units.values():
                await unit.down()
                await unit.remove_everything()
            await asyncio.to_thread(stop_engine, engine)
            await asyncio.gather(*(s.stop() for s in fleet), return_exceptions=True)
            await hub.stop()
            await kube.close()
