"""``cloudhub demo``: a whole edge fleet on one machine, an outage, and convergence.

Phases (each check below ends "converged" or "not converged: <what>"; the exit code is 0
only when every one converged):

1. **engine**: podman's Docker API when ``--runtime`` is ``auto`` or ``docker`` and podman
   runs here (a private engine, busybox imported from the host's static busybox), else the
   process runtime; the demo says which and why.
2. **hub**: ``cloudhub serve`` on its embedded API; its PKI makes the CA and publishes the
   join address and CA pin (``edgefleet-hub-info``).
3. **join**: one single-use bootstrap token per node, bound to its name; ``edgeagent join``
   (key made on the node, CSR, pinned CA) for every node at once.
4. **fleet**: per node a relay the demo controls, the agent dialling the hub through it
   (QUIC or WebSocket), the simulated and thermal mappers on its device API.
5. **apply**: the manifests of :mod:`cloudhub.demo.manifests` (ConfigMaps, a Secret,
   Deployments and an EdgePlacement through placement, KubeEdge DeviceModels and Devices).
6. **converge**: nodes Ready over their transport, pods Running, twin round trips (a
   desired setpoint reported back by the simulated mapper), thermal readings, node metrics
   at the hub's ``/metrics``.
7. **outage**: the last node's relay drops every packet; once the hub sees the node
   offline, a ConfigMap and a thermostat's desired setpoint change in the cloud and a
   reported value changes on the edge; the node's pods keep running (its own store says
   so); the link comes back; the time until everything converged is measured.
8. **day2**: ``kubectl logs`` and ``kubectl exec`` on an edge pod.
9. **upgrade** (``--upgrade`` only, :mod:`cloudhub.demo.upgrade`): the first node's agent,
   installed by deploy/install.sh, is upgraded to the next version by an EdgeUpgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from cloudhub.demo import manifests
from cloudhub.demo.day2 import Day2
from cloudhub.demo.errors import DemoError
from cloudhub.demo.phases import Phases, Stuck
from cloudhub.demo.processes import AgentProcess, HubProcess
from cloudhub.demo.relay import Relay
from cloudhub.demo.upgrade import InstalledAgent, Prepared, UpgradePhase, prepare
from cloudhub.devtools.fleet import free_port, sweep
from cloudhub.errors import ConfigError, HubError, KubeAPIError, KubeConflict
from cloudhub.kube import CONFIGMAPS, CRDS, NODES, PODS, SECRETS, KubeClient, ResourceType

__all__ = ["Check", "Demo", "DemoOptions", "DemoState"]

DEVICES = ResourceType("devices.kubeedge.io", "v1beta1", "devices", "Device", True)
DEVICE_MODELS = ResourceType("devices.kubeedge.io", "v1beta1", "devicemodels", "DeviceModel", True)
PLACEMENTS = ResourceType("apps.edgefleet.io", "v1alpha1", "edgeplacements", "EdgePlacement", True)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
KINDS = {
    "ConfigMap": CONFIGMAPS,
    "Secret": SECRETS,
    "Deployment": DEPLOYMENTS,
    "EdgePlacement": PLACEMENTS,
    "DeviceModel": DEVICE_MODELS,
    "Device": DEVICES,
}


@dataclass(frozen=True)
class DemoOptions:
    """What ``cloudhub demo`` was asked for.

    Attributes:
        nodes: edge nodes (agents), 1..10.
        transport: ``mixed`` (alternating, odd nodes QUIC), ``quic`` or ``websocket``.
        runtime: ``auto`` (podman if it runs here, else processes), ``docker`` or ``process``.
        keep: leave the fleet running and the directory in place, print a kubeconfig.
        converge_timeout: seconds each phase waits for convergence before it reports
            what did not converge.
        outage_seconds: seconds the link stays cut after the hub saw the node go offline.
        kubectl: the kubectl for the day-2 checks (``None``: found by
            :func:`cloudhub.demo.day2.find_kubectl`).
        upgrade: install the first node's agent with deploy/install.sh and, at the end,
            upgrade it to the next version by an EdgeUpgrade (:mod:`cloudhub.demo.upgrade`).
    """

    nodes: int = 3
    transport: str = "mixed"
    runtime: str = "auto"
    keep: bool = False
    converge_timeout: float = 30.0
    outage_seconds: float = 4.0
    kubectl: str | None = None
    upgrade: bool = False


@dataclass
class Check:
    """One thing that must converge."""

    name: str
    what: str
    state: str = "pending"  # pending | converged | not converged
    detail: str = ""
    seconds: float | None = None

    def ok(self, detail: str = "", seconds: float | None = None) -> None:
        self.state, self.detail, self.seconds = "converged", detail, seconds

    def fail(self, detail: str) -> None:
        self.state, self.detail = "not converged", detail

    @property
    def done(self) -> bool:
        return self.state != "pending"


@dataclass
class DemoState:
    """What the live table shows; updated by the poller and the phases."""

    phase: str = "starting"
    runtime: str = ""
    runtime_reason: str = ""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    checks: dict[str, Check] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    cut_node: str = ""
    round_trips: list[float] = field(default_factory=list)
    convergence_seconds: float | None = None
    outage_length: float | None = None
    kubeconfig: str = ""
    directory: str = ""
    day2_pod: tuple[str, str, str] | None = None
    upgrade: dict[str, Any] | None = None  # the EdgeUpgrade object (--upgrade)

    def check(self, name: str, what: str) -> Check:
        return self.checks.setdefault(name, Check(name, what))

    @property
    def converged(self) -> bool:
        return bool(self.checks) and all(c.state == "converged" for c in self.checks.values())

    def summary(self) -> dict[str, Any]:
        """The summary as data (``--summary-json``)."""
        ready = [n for n, v in self.nodes.items() if v.get("ready") == "True"]
        running = [p for p in self.pods if p["phase"] == "Running"]
        return {
            "converged": self.converged,
            "runtime": self.runtime,
            "runtime_reason": self.runtime_reason,
            "nodes": {n: dict(v) for n, v in self.nodes.items()},
            "nodes_ready": len(ready),
            "pods": len(self.pods),
            "pods_running": len(running),
            "twin_round_trips": len(self.round_trips),
            "twin_round_trip_seconds": [round(s, 3) for s in self.round_trips],
            "cut_node": self.cut_node,
            "convergence_seconds": self.convergence_seconds,
            "outage_seconds": self.outage_length,
            "upgrade": self.upgrade.get("status") if self.upgrade else None,
            "checks": {
                c.name: {"what": c.what, "state": c.state, "detail": c.detail, "seconds": c.seconds}
                for c in self.checks.values()
            },
            "not_converged": [
                f"{c.name}: {c.detail}" for c in self.checks.values() if c.state != "converged"
            ],
        }


def _ready(node: dict) -> str:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return "-"


def _twin(device: dict, prop: str) -> str | None:
    for twin in (device.get("status") or {}).get("twins") or []:
        if twin.get("propertyName") == prop:
            return (twin.get("reported") or {}).get("value")
    return None


def _desired(device: dict, prop: str) -> str | None:
    for p in (device.get("spec") or {}).get("properties") or []:
        if p.get("name") == prop:
            return (p.get("desired") or {}).get("value")
    return None


class Demo(Phases, Day2, UpgradePhase):
    """Runs the demo (see the module docstring); :meth:`run` returns the exit code.

    Args:
        options: what was asked for.
        on_event: called with a line for every step (the command prints them).
    """

    def __init__(self, options: DemoOptions, on_event: Callable[[str], None]) -> None:
        self.options = options
        self.state = DemoState()
        self._emit = on_event
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="edgefleet-demo-"))
        self.state.directory = str(self.root)
        self.hub: HubProcess | None = None
        self.agents: list[AgentProcess] = []
        self.relays: dict[str, Relay] = {}
        self.engine: Any = None
        self.client: KubeClient | None = None
        self._poller: asyncio.Task | None = None
        self._metrics_prev: dict[str, tuple[float, float]] = {}
        self._prepare: asyncio.Future[Prepared] | None = None

    def event(self, text: str) -> None:
        self.state.log.append(text)
        self._emit(text)

    # -- the whole run -----------------------------------------------------------------------

    async def run(self, keep_running: Callable[[], Awaitable[None]] | None = None) -> int:
        """Run every phase, then clean up (unless ``keep``).

        Args:
            keep_running: with ``keep``, awaited after the summary (until the user stops).

        Returns:
            0 when everything converged, 1 otherwise.
        """
        try:
            try:
                await self._phases()
            except (HubError, OSError) as exc:
                self.state.check("setup", "the fleet starts").fail(str(exc))
                self.event(f"setup failed: {exc}")
            self.state.phase = "done"
            if self.options.keep and keep_running is not None and self.hub is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await keep_running()
        finally:  # also when interrupted: nothing is left running
            self.state.phase = "done"
            await self._cleanup_to_the_end()
        return 0 if self.state.converged else 1

    async def _cleanup_to_the_end(self) -> None:
        """Run :meth:`cleanup` to its end even if this task is cancelled again meanwhile
        (a second Ctrl-C); then let the cancellation through."""
        cleanup = asyncio.ensure_future(self.cleanup())
        cancelled = False
        while not cleanup.done():
            try:
                await asyncio.shield(cleanup)
            except asyncio.CancelledError:
                cancelled = True
        cleanup.result()
        if cancelled:
            raise asyncio.CancelledError

    async def _phases(self) -> None:
        o = self.options
        names = [f"edge-{i + 1}" for i in range(o.nodes)]
        kept = "kept" if o.keep else "removed at the end"
        self.event(f"directory: {self.root} (state and logs; {kept})")
        flags = {}
        if o.upgrade:  # pip's builds and install.sh run while the engine and hub start
            artifacts = self.root / "artifacts"
            self._prepare = asyncio.ensure_future(prepare(self.root, names[0], artifacts))
            flags = {"upgrade-artifact-dir": str(artifacts), "upgrade-interval": "0.5"}
            self.event(f"upgrade: installing {names[0]}'s agent with deploy/install.sh…")
        self.state.phase = "engine"
        docker = await self._engine()
        self.state.phase = "hub"
        self.hub = HubProcess(self.root, flags)
        self.hub.start()
        self.event("hub: cloudhub serve on its embedded API (PKI makes the CA)")
        # The CRDs go in as soon as the embedded API answers, before the hub is ready: a
        # hub extension's informer over Devices or EdgePlacements waits for its CRD.
        await self._until(self._api_up, 60, "the hub's embedded API")
        self.state.kubeconfig = str(self.hub.kubeconfig)
        await self._install_crds()
        await self.hub.wait_ready(60)
        prepared = None
        if self._prepare is not None:
            self.state.phase = "install"
            prepared = await self._prepare
            where = prepared.install_root
            self.event(f"upgrade: {names[0]} runs edgefleet {prepared.old} from {where}")
        self.state.phase = "join"
        await self._join(names, docker, prepared)
        self.state.phase = "fleet"
        await self._start_fleet()
        self._poller = asyncio.ensure_future(self._poll())
        self.state.phase = "apply"
        await self._apply(names)
        self.state.phase = "converge"
        await self._converge(names)
        self.state.phase = "outage"
        await self._outage()
        self.state.phase = "day2"
        await self._day2()
        if prepared is not None:
            self.state.phase = "upgrade"
            await self._upgrade(prepared)

    # -- phases ---------------------------------------------------------------------------------

    async def _engine(self) -> dict[str, str] | None:
        o = self.options
        check = self.state.check("runtime", "a container runtime for the pods")
        if o.runtime == "process":
            self.state.runtime, self.state.runtime_reason = (
                "process",
                "asked for (--runtime process)",
            )
            check.ok("process runtime")
            self.event("runtime: process (asked for)")
            return None
        from cloudhub.devtools.engine import EngineUnavailable, start_engine

        self.event("runtime: starting a private podman engine (Docker API)…")
        try:
            self.engine = await asyncio.to_thread(start_engine, self.root / "engine")
        except EngineUnavailable as exc:
            if o.runtime == "docker":
                raise DemoError(f"--runtime docker: {exc}") from exc
            self.state.runtime, self.state.runtime_reason = "process", str(exc)
            check.ok("process runtime (no container engine)")
            self.event(f"runtime: process — no container engine: {exc}")
            return None
        self.state.runtime = "docker"
        self.state.runtime_reason = (
            f"podman ({self.engine.network_backend} network), Docker API at {self.engine.url}"
        )
        check.ok(self.state.runtime_reason)
        self.event(f"runtime: docker — {self.state.runtime_reason}, image {self.engine.image}")
        return {
            "url": self.engine.url,
            "network": self.engine.network,
            "sandbox_image": self.engine.image,
        }

    @property
    def image(self) -> str:
        return self.engine.image if self.engine is not None else "localhost/busybox:latest"

    async def _api_up(self) -> bool:
        assert self.hub is not None
        if not self.hub.running:
            raise DemoError(f"the hub exited:\n{self.hub.log_tail()}")
        if self.client is None:
            if not self.hub.kubeconfig.exists():
                return False
            try:
                self.client = await KubeClient.from_kubeconfig(str(self.hub.kubeconfig))
            except ConfigError:  # being written
                return False
        try:
            await self.client.version(timeout=2)
        except KubeAPIError:
            return False
        return True

    async def _install_crds(self) -> None:
        assert self.client is not None
        for crd in manifests.crd_documents():
            with contextlib.suppress(KubeConflict):
                # rbac: operator's credentials (the embedded API's admin kubeconfig)
                await self.client.create(CRDS, crd)
        for rt in (DEVICES, DEVICE_MODELS, PLACEMENTS):
            await self._until(lambda rt=rt: self._served(rt), 20, f"{rt.plural} served")

    async def _served(self, rt: ResourceType) -> bool:
        assert self.client is not None
        try:
            # rbac: operator's credentials (the embedded API's admin kubeconfig)
            await self.client.list(rt, "default")
        except KubeAPIError:
            return False
        return True

    async def _join(
        self, names: list[str], docker: dict[str, str] | None, prepared: Prepared | None
    ) -> None:
        from cloudhub.pki.ca import read_hub_info
        from cloudhub.pki.settings import PKISettings
        from cloudhub.pki.tokens import TokenStore

        assert self.client is not None and self.hub is not None
        check = self.state.check("join", "every node joined with its own bootstrap token")
        namespace = PKISettings().namespace
        info = await self._until(
            lambda: read_hub_info(self.client, namespace), 20, "the hub's join information"
        )
        tokens = TokenStore(self.client, namespace, retention=3600)
        started = time.monotonic()
        transports = self.options.transport
        for i, name in enumerate(names):
            kind = transports if transports != "mixed" else ("websocket" if i % 2 else "quic")
            if i == 0 and prepared is not None:
                agent = InstalledAgent(
                    name, self.root, kind, free_port(), docker, install_root=prepared.install_root
                )
            else:
                agent = AgentProcess(name, self.root, kind, free_port(), docker=docker)
            self.agents.append(agent)
            self.state.nodes[name] = {
                "transport": kind,
                "ready": "-",
                "link": "up",
                "joined": False,
            }

        async def one(agent: AgentProcess, site: str) -> None:
            token, _ = await tokens.create(
                ttl=600,
                single_use=True,
                node_name=agent.node,
                labels={"site": site},
                description="cloudhub demo",
            )
            await agent.join(info["joinAddress"], token, info["caCertHash"], f"site={site}")
            self.state.nodes[agent.node]["joined"] = True
            self.event(
                f"join: {agent.node} joined with token {token.split('.')[0]}.… (site {site})"
            )

        results = await asyncio.gather(
            *(one(a, "north" if i % 2 == 0 else "south") for i, a in enumerate(self.agents)),
            return_exceptions=True,
        )
        failed = [str(r) for r in results if isinstance(r, BaseException)]
        if failed:
            check.fail("; ".join(failed))
            raise DemoError("join failed: " + "; ".join(failed))
        check.ok(f"{len(names)} node(s), {time.monotonic() - started:.1f} s", None)

    def _sysfs(self) -> pathlib.Path:
        """A thermal zone for the thermal mapper: the host's, or a simulated one when the
        host has none (containers and most VMs)."""
        real = pathlib.Path("/sys/class/thermal")
        if real.is_dir() and any(p.name.startswith("thermal_zone") for p in real.iterdir()):
            return pathlib.Path("/sys")
        zone = self.root / "sysfs" / "class" / "thermal" / "thermal_zone0"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "type").write_text("cpu-thermal\n")
        (zone / "temp").write_text("47500\n")
        self.event("thermal: no thermal zone on this host: a simulated sysfs zone (47.5 °C)")
        return self.root / "sysfs"

    async def _start_fleet(self) -> None:
        assert self.hub is not None
        sysfs = self._sysfs()
        for agent in self.agents:
            relay = Relay(self.hub.session_port, agent.relay_port)
            await relay.start()
            self.relays[agent.node] = relay
            agent.start()
            self.event(
                f"fleet: {agent.node} agent ({agent.transports}, {agent.runtime} runtime) via "
                f"relay :{agent.relay_port}"
            )
        for agent in self.agents:
            await self._until(agent.device_socket.exists, 30, f"{agent.node}'s device API")
            agent.start_mappers(sysfs)
        self.event("fleet: simulated and thermal mappers on every node's device API")

    async def _apply(self, names: list[str]) -> None:
        assert self.client is not None
        check = self.state.check("apply", "the manifests are accepted by the API")
        refused = []
        upstream = manifests.load("kubeedge-onvif-secret.yaml")[0]
        upstream["metadata"]["namespace"] = "default"
        try:
            # rbac: operator's credentials (the embedded API's admin kubeconfig)
            await self.client.create(SECRETS, upstream)
        except KubeAPIError as exc:
            self.event(f"apply: kubeedge-onvif-secret.yaml refused as upstream ships it: {exc}")
        else:
            # rbac: operator's credentials (the embedded API's admin kubeconfig)
            await self.client.delete(SECRETS, upstream["metadata"]["name"], "default")
        for item in manifests.demo_objects(names, self.image):
            rt = KINDS[item.kind]
            try:
                # rbac: operator's credentials (the embedded API's admin kubeconfig)
                await self.client.create(rt, item.obj)
            except KubeAPIError as exc:
                refused.append(f"{item.kind} {item.name}: {exc}")
                continue
            changed = f" (changed: {'; '.join(item.changes)})" if item.changes else ""
            self.event(f"apply: {item.kind} {item.name} from {item.source}{changed}")
        if refused:
            check.fail("; ".join(refused))
        else:
            check.ok()

    # -- convergence ----------------------------------------------------------------------------

    async def _until(self, probe: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            if time.monotonic() > deadline:
                raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}")
            await asyncio.sleep(0.25)

    async def _wait_checks(self, probes: dict[str, Callable[[], Awaitable[str | None]]]) -> None:
        """Run every probe until it converges or the phase's time is up; a probe returns
        ``None`` while pending, ``""`` when converged, or raises ``Stuck`` early."""
        started = time.monotonic()
        pending = dict(probes)
        errors: dict[str, str] = {}  # the last transient failure of a probe (API, socket)
        while pending:
            for name, probe in list(pending.items()):
                check = self.state.checks[name]
                try:
                    result = await probe()
                except Stuck as exc:
                    check.fail(str(exc))
                    self.event(f"✗ {check.what}: not converged: {exc}")
                    del pending[name]
                    continue
                except (HubError, OSError) as exc:
                    errors[name] = str(exc)
                    continue
                if result is not None:
                    check.ok(result, time.monotonic() - started)
                    self.event(f"✓ {check.what} ({check.seconds:.1f} s) {result}")
                    del pending[name]
            if pending and time.monotonic() - started > self.options.converge_timeout:
                for name, probe in pending.items():
                    check = self.state.checks[name]
                    why = getattr(probe, "why", lambda: "")()
                    why = why or f"not within {self.options.converge_timeout:.0f} s"
                    if name in errors:
                        why += f" (last error: {errors[name]})"
                    check.fail(why)
                    self.event(f"✗ {check.what}: not converged: {check.detail}")
                return
            await asyncio.sleep(0.5)

    async def _expected_pods(self) -> int:
        """Pods the workloads ask for: Deployment replicas plus one per node (PerNode)."""
        assert self.client is not None
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        deployments, _ = await self.client.list(DEPLOYMENTS, "default")
        replicas = sum(int((d.get("spec") or {}).get("replicas", 1)) for d in deployments)
        return replicas + len(self.agents)

    def _reported(self, device: str, prop: str) -> str | None:
        for d in self.state.devices:
            if d["name"] == device:
                return d["reported"].get(prop)
        return None

    async def _set_desired(self, device: str, prop: str, value: float) -> None:
        assert self.client is not None
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        obj = await self.client.get(DEVICES, device, "default")
        props = obj["spec"].get("properties") or []
        for i, p in enumerate(props):
            if p.get("name") == prop:
                patch = [
                    {
                        "op": "add",
                        "path": f"/spec/properties/{i}/desired",
                        "value": {"value": f"{value:g}"},
                    }
                ]
                # rbac: operator's credentials (the embedded API's admin kubeconfig)
                await self.client.patch(DEVICES, device, patch, "default", patch_type="json")
                self.event(f"cloud: {device} desired {prop} = {value:g}")
                return
        raise DemoError(f"{device} has no property {prop}")

    # -- the outage -----------------------------------------------------------------------------

    # -- the poller (the live table's data) -----------------------------------------------------

    async def _poll(self) -> None:
        while True:
            try:
                await self._poll_once()
            except (HubError, OSError, ValueError):
                pass
            await asyncio.sleep(0.5)

    async def _poll_once(self) -> None:
        assert self.client is not None
        s = self.state
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        nodes, _ = await self.client.list(NODES)
        for node in nodes:
            name = node["metadata"]["name"]
            if name in s.nodes:
                s.nodes[name]["ready"] = _ready(node)
                annotations = node["metadata"].get("annotations") or {}
                s.nodes[name]["seen_transport"] = annotations.get("edgefleet.io/transport")
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        pods, _ = await self.client.list(PODS, "default")
        s.pods = [
            {
                "name": p["metadata"]["name"],
                "node": (p.get("spec") or {}).get("nodeName") or "-",
                "phase": (p.get("status") or {}).get("phase") or "Pending",
            }
            for p in pods
        ]
        try:
            # rbac: operator's credentials (the embedded API's admin kubeconfig)
            devices, _ = await self.client.list(DEVICES, "default")
        except KubeAPIError:
            devices = []
        s.devices = [
            {
                "name": d["metadata"]["name"],
                "node": d["spec"].get("nodeName", "-"),
                "desired": {
                    p["name"]: (p.get("desired") or {}).get("value")
                    for p in d["spec"].get("properties") or []
                    if p.get("desired")
                },
                "reported": {
                    t["propertyName"]: (t.get("reported") or {}).get("value")
                    for t in (d.get("status") or {}).get("twins") or []
                    if t.get("reported")
                },
            }
            for d in devices
        ]
        await self._scrape_metrics()

    async def _scrape_metrics(self) -> None:
        import aiohttp
        from prometheus_client.parser import text_string_to_metric_families

        assert self.hub is not None
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(self.hub.metrics_url, timeout=aiohttp.ClientTimeout(3)) as r:
                    text = await r.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return
        found: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                node = sample.labels.get("node")
                if node not in self.state.nodes:
                    continue
                entry = found.setdefault(node, {})
                if sample.name == "edgefleet_node_memory_working_set_bytes":
                    entry["memory_mib"] = sample.value / 2**20
                elif sample.name == "edgefleet_node_cpu_usage_seconds_total":
                    entry["cpu_seconds"] = sample.value
                elif sample.name == "edgefleet_node_cpu_capacity_cores":
                    entry["cores"] = sample.value
                elif sample.name == "edgefleet_node_last_sample_timestamp_seconds":
                    entry["sampled_at"] = sample.value
        for node, entry in found.items():
            # CPU %: between two samples of the node (their own timestamps), of its cores.
            at, used = entry.get("sampled_at"), entry.get("cpu_seconds")
            previous = self.state.metrics.get(node, {})
            entry.setdefault("cpu_percent", previous.get("cpu_percent", float("nan")))
            if at is None or used is None:
                continue
            prev = self._metrics_prev.get(node)
            if prev is not None and at > prev[0] and used >= prev[1]:
                cores = entry.get("cores") or 1.0
                entry["cpu_percent"] = 100 * (used - prev[1]) / (at - prev[0]) / cores
            if prev is None or at > prev[0]:
                self._metrics_prev[node] = (at, used)
        self.state.metrics.update(found)

    # -- cleanup --------------------------------------------------------------------------------

    async def cleanup(self) -> None:
        """Stop everything the demo started; remove its directory unless ``keep``."""
        for task in (self._poller, self._prepare):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await asyncio.gather(*(a.stop() for a in self.agents), return_exceptions=True)
        if self.client is not None:
            await self.client.close()
        if self.hub is not None:
            await self.hub.stop()
        for relay in self.relays.values():
            await relay.aclose()
        if self.engine is not None:
            from cloudhub.devtools.engine import stop_engine

            await asyncio.to_thread(stop_engine, self.engine)
        await asyncio.to_thread(sweep, self.root)
        if not self.options.keep:
            shutil.rmtree(self.root, ignore_errors=True)
