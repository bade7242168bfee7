"""The demo's two checked phases, as parts of :class:`cloudhub.demo.run.Demo`:
convergence (nodes Ready, workloads Running, the twin round trip, thermal readings and
node metrics, each timed) and the outage (a node's link cut: Ready goes False, changes on
both sides while it is cut off, then everything delivered after it heals).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from cloudhub.demo.errors import DemoError
from cloudhub.demo.processes import AgentProcess
from cloudhub.kube import CONFIGMAPS

__all__ = ["OUTAGE_CONFIGMAP", "OUTAGE_REPORTED", "Phases", "Stuck"]

#: The ConfigMap changed during the outage (its pods run on every node: PerNode).
OUTAGE_CONFIGMAP = "mosquitto-config"

#: The corpus device whose reported value the edge changes during the outage.
OUTAGE_REPORTED = ("vled-instance-01", "status", 1)


def _same_number(a: str | None, b: float) -> bool:
    try:
        return a is not None and abs(float(a) - b) < 1e-6
    except ValueError:
        return False


class Stuck(DemoError):
    """A probe knows it will not converge (the message says why)."""


class Phases:
    """Convergence and the outage; they use the demo's state, fleet, client and probes
    (``self.state``, ``self.agents``, ``self.client``, ``self._until``...)."""

    async def _converge(self, names: list[str]) -> None:
        s = self.state
        s.check("nodes", "every node Ready over its transport")
        s.check("pods", "workloads placed and Running")
        s.check("twins", "twin round trip: desired setpoint reported back by the mapper")
        s.check("thermal", "thermal readings reported to the cloud")
        s.check("metrics", "node metrics at the hub")
        applied = time.monotonic()
        targets = {f"thermostat-{n}": 22.0 for n in names}
        desired_at: dict[str, float] = {}

        async def nodes() -> str | None:
            bad = [
                n
                for n, v in s.nodes.items()
                if v.get("ready") != "True" or v.get("seen_transport") != v["transport"]
            ]
            return None if bad else f"{len(names)}/{len(names)}"

        nodes.why = lambda: (
            "not Ready or wrong transport: "
            + ", ".join(  # type: ignore[attr-defined]
                f"{n} (Ready={v.get('ready')}, transport={v.get('seen_transport')})"
                for n, v in s.nodes.items()
                if v.get("ready") != "True" or v.get("seen_transport") != v["transport"]
            )
        )

        async def pods() -> str | None:
            expected = await self._expected_pods()
            if not s.pods and time.monotonic() - applied > 15:
                raise Stuck(
                    "no pods were created for the Deployments and the EdgePlacement within "
                    "15 s: the placement controller is not running in the hub"
                )
            running = [p for p in s.pods if p["phase"] == "Running"]
            if expected and len(running) >= expected and len(running) == len(s.pods):
                return f"{len(running)} Running on {len({p['node'] for p in running})} node(s)"
            return None

        pods.why = (
            lambda: (  # type: ignore[attr-defined]
                f"{sum(p['phase'] == 'Running' for p in s.pods)}/{len(s.pods)} pods Running: "
                + ", ".join(f"{p['name']}@{p['node']}={p['phase']}" for p in s.pods[:6])
            )
        )

        async def twins() -> str | None:
            if not any(d["reported"] for d in s.devices) and time.monotonic() - applied > 20:
                raise Stuck(
                    "no Device has a reported value after 20 s: the hub does not handle "
                    "device twins yet (Devices not sent to nodes, twin_reported not written)"
                )
            for name, value in targets.items():
                if name not in desired_at:
                    if any(d["name"] == name and d["reported"] for d in s.devices):
                        # the mapper runs it: now ask for a new setpoint and time the trip
                        await self._set_desired(name, "setpoint", value)
                        desired_at[name] = time.monotonic()
                    continue
            done = [
                name
                for name, value in targets.items()
                if name in desired_at and _same_number(self._reported(name, "setpoint"), value)
            ]
            for name in done:
                if name in desired_at:
                    s.round_trips.append(time.monotonic() - desired_at.pop(name))
                    targets.pop(name)
            if not targets:
                med = statistics.median(s.round_trips)
                return f"{len(s.round_trips)} round trip(s), median {med:.2f} s"
            return None

        twins.why = lambda: "setpoint not reported back for " + ", ".join(targets)  # type: ignore[attr-defined]

        async def thermal() -> str | None:
            if time.monotonic() - applied > 20 and not any(d["reported"] for d in s.devices):
                raise Stuck("no Device status written by the hub (device twins not hooked up)")
            zones = [self._reported(f"{n}-cpu-thermal", "temperature") for n in names]
            return None if None in zones else ", ".join(f"{z} °C" for z in zones)

        thermal.why = lambda: "no temperature reported for some zones"  # type: ignore[attr-defined]

        async def metrics() -> str | None:
            if not s.metrics and time.monotonic() - applied > 20:
                raise Stuck(
                    "no edgefleet_node_* series at the hub's /metrics after 20 s: the hub "
                    "does not ingest metrics batches yet"
                )
            return f"{len(names)} node(s)" if all(n in s.metrics for n in names) else None

        metrics.why = lambda: (
            "no metrics yet for "
            + ", ".join(  # type: ignore[attr-defined]
                n for n in names if n not in s.metrics
            )
        )

        await self._wait_checks(
            {"nodes": nodes, "pods": pods, "twins": twins, "thermal": thermal, "metrics": metrics}
        )

    async def _outage(self) -> None:
        assert self.client is not None
        s = self.state
        agent = self.agents[-1]
        node = s.cut_node = agent.node
        relay = self.relays[node]
        twins_work = s.checks["twins"].state == "converged"
        pods_work = s.checks["pods"].state == "converged"
        offline = s.check("outage-offline", f"the hub sees {node} offline while cut")
        kept = s.check("outage-pods", f"{node}'s pods keep running while cut off")
        back = s.check("outage-ready", f"{node} Ready again after the link returns")
        cm = s.check(
            "outage-configmap", f"ConfigMap {OUTAGE_CONFIGMAP} changed offline reaches {node}"
        )
        desired = s.check("outage-desired", f"desired setpoint changed offline reported by {node}")
        reported = s.check("outage-reported", f"value reported on {node} offline reaches the cloud")

        before = await agent.status() or {}
        node_pods = [p for p in before.get("pods", []) if p["phase"] == "Running"]
        relay.cut()
        s.nodes[node]["link"] = "cut"
        cut_at = time.monotonic()
        self.event(f"outage: {node}'s link cut (the relay drops every packet, closes nothing)")
        try:
            await self._until(lambda: s.nodes[node].get("ready") != "True", 20, "Ready != True")
            offline.ok(f"Ready={s.nodes[node].get('ready')}", time.monotonic() - cut_at)
            self.event(
                f"✓ hub: {node} Ready={s.nodes[node].get('ready')} after "
                f"{time.monotonic() - cut_at:.1f} s"
            )
        except DemoError as exc:
            offline.fail(str(exc))

        # Changes made while the node is cut off, on both sides.
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        cm_obj = await self.client.patch(
            CONFIGMAPS,
            OUTAGE_CONFIGMAP,
            {"data": {"mosquitto.conf": "listener 1883 0.0.0.0\nallow_anonymous false\n"}},
            "default",
        )
        cm_rv = cm_obj["metadata"]["resourceVersion"]
        self.event(f"cloud: ConfigMap {OUTAGE_CONFIGMAP} changed (resourceVersion {cm_rv})")
        setpoint = 26.0
        if twins_work:
            await self._set_desired(f"thermostat-{node}", "setpoint", setpoint)
        edge_value = None
        try:
            edge_value = await self._report_on_edge(agent, *OUTAGE_REPORTED)
            self.event(
                f"edge: {node} reported {OUTAGE_REPORTED[0]} {OUTAGE_REPORTED[1]}="
                f"{OUTAGE_REPORTED[2]} on its device API (the hub is unreachable)"
            )
        except DemoError as exc:
            reported.fail(f"the edge refused the report ({exc}): the Device did not reach {node}")

        await asyncio.sleep(self.options.outage_seconds)
        during = await agent.status() or {}
        still = {p["uid"] for p in during.get("pods", []) if p["phase"] == "Running"}
        if not node_pods:
            kept.fail(f"{node} ran no pods before the cut (placement did not converge)")
        elif {p["uid"] for p in node_pods} <= still:
            kept.ok(f"{len(node_pods)} pod(s) Running on {node} (its own store)")
            self.event(f"✓ {node}: {len(node_pods)} pod(s) still Running with no hub")
        else:
            kept.fail(f"pods stopped while offline: {sorted({p['name'] for p in node_pods})}")

        relay.restore()
        s.nodes[node]["link"] = "up"
        restored = time.monotonic()
        s.outage_length = restored - cut_at
        self.event(f"outage: {node}'s link restored after {restored - cut_at:.1f} s")

        async def ready() -> str | None:
            return "" if s.nodes[node].get("ready") == "True" else None

        async def configmap() -> str | None:
            if not pods_work:
                raise Stuck(f"no pod on {node} uses it (placement did not converge)")
            status = await agent.status() or {}
            for obj in status.get("objects", []):
                if obj["kind"] == "ConfigMap" and obj["name"] == OUTAGE_CONFIGMAP:
                    return "" if obj["resourceVersion"] == cm_rv else None
            return None

        async def desired_back() -> str | None:
            if not twins_work:
                raise Stuck("device twins did not converge before the outage")
            return (
                ""
                if _same_number(self._reported(f"thermostat-{node}", "setpoint"), setpoint)
                else None
            )

        async def reported_up() -> str | None:
            if edge_value is None:
                raise Stuck(reported.detail or "the edge report failed")
            if not twins_work:
                raise Stuck("device twins did not converge before the outage")
            return (
                ""
                if _same_number(
                    self._reported(OUTAGE_REPORTED[0], OUTAGE_REPORTED[1]), OUTAGE_REPORTED[2]
                )
                else None
            )

        probes = {
            "outage-ready": ready,
            "outage-configmap": configmap,
            "outage-desired": desired_back,
        }
        if edge_value is not None or not reported.done:
            probes["outage-reported"] = reported_up
        await self._wait_checks(probes)  # times measured from the restore
        done = [c.seconds for c in (back, cm, desired, reported) if c.state == "converged"]
        if done and all(c.state == "converged" for c in (back, cm, desired, reported)):
            s.convergence_seconds = max(x for x in done if x is not None)
            self.event(f"✓ converged {s.convergence_seconds:.1f} s after the link came back")

    async def _report_on_edge(self, agent: AgentProcess, device: str, prop: str, value: Any) -> Any:
        """POST a reported value to the node's local device API (as a mapper would)."""
        import aiohttp

        url = f"http://localhost/v1/devices/default/{device}/reported"
        try:
            connector = aiohttp.UnixConnector(path=str(agent.device_socket))
            async with aiohttp.ClientSession(connector=connector) as http:
                async with http.post(
                    url, json={"property": prop, "value": value}, timeout=aiohttp.ClientTimeout(5)
                ) as answer:
                    body = await answer.text()
                    if answer.status != 200:
                        raise DemoError(f"device API answered {answer.status}: {body.strip()}")
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise DemoError(f"device API of {agent.node} unreachable: {exc}") from exc
        return value
