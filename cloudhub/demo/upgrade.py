"""``cloudhub demo --upgrade``: one agent upgrade rolled out by an EdgeUpgrade, as a part
of :class:`cloudhub.demo.run.Demo`.

The first node's agent is installed by deploy/install.sh from a wheel of this tree into
``<demo>/install/<node>`` (its venv ``opt/edgeagent``) and runs under the stand-in for its
systemd unit (:class:`cloudhub.devtools.installed.SystemdUnit`: the start guard before
each start, restart on exit, only the agent's process signalled), dialling the hub through
its relay like the other nodes. After the day-2 phase, an EdgeUpgrade selecting that node
(``kubernetes.io/hostname``) asks for the next version (``0.1.0`` -> ``0.1.1``), a wheel
built from this tree into the hub's artifact directory. The live view shows the
EdgeUpgrade's progress as ``cloudhub upgrade status NAME`` does; the check ``upgrade``
converges when the rollout is Completed, the node Healthy and reporting the new version,
and none of its pods restarted (same container id, same restart count).
"""

from __future__ import annotations

import asyncio
import hashlib
import pathlib
import shutil
import time
from dataclasses import dataclass
from typing import Any

from cloudhub.demo.errors import DemoError
from cloudhub.demo.processes import AgentProcess
from cloudhub.devtools.errors import DevtoolsError
from cloudhub.devtools.fleet import Child
from cloudhub.devtools.installed import (
    SystemdUnit,
    bumped,
    current_version,
    install_roots,
    installed_env,
)
from cloudhub.devtools.wheels import build_wheel
from cloudhub.errors import HubError, KubeAPIError
from cloudhub.kube import NODES, PODS
from cloudhub.nodes.model import AGENT_VERSION_ANNOTATION
from cloudhub.upgrade.cli import EDGEUPGRADES

__all__ = ["InstalledAgent", "Prepared", "UpgradePhase", "prepare"]

#: Seconds the rollout has to complete (download, new venv, restart, health gate).
UPGRADE_TIMEOUT = 240.0


@dataclass
class InstalledAgent(SystemdUnit, AgentProcess):
    """A demo node whose agent is the venv install.sh put under ``install_root``, run by
    the systemd unit's stand-in (``start`` is ``systemctl start``)."""

    install_root: pathlib.Path | None = None

    def __post_init__(self) -> None:
        self.unit_init()

    @property
    def prefix(self) -> pathlib.Path:  # type: ignore[override]
        assert self.install_root is not None
        return self.install_root / "opt" / "edgeagent"

    @property
    def proc(self):  # type: ignore[override]
        agent = self.agent
        return agent.proc if agent is not None else None

    async def join(self, join_address: str, token: str, ca_hash: str, labels: str) -> None:
        """Join as every node does, then let the agent carry out the hub's EdgeUpgrades.

        Raises:
            DemoError: the join failed.
        """
        await super().join(join_address, token, ca_hash, labels)
        text = self.config.read_text(encoding="utf-8")
        self.config.write_text(text + "upgrade:\n  enabled: true\n", encoding="utf-8")

    def start(self) -> None:
        """``systemctl start edgeagent``: the unit's stand-in supervises the agent."""
        self.up()

    def start_once(self) -> None:
        args = self.agent_args(str(self.prefix / "bin" / "python"))
        agent = Child(
            f"{self.node}/agent", args, self.root, self.dir / "agent.log", env=installed_env()
        )
        with open(agent.log_path, "a", encoding="utf-8") as log:
            log.write(f"--- start {self.installed_version()} ---\n")
        agent.start()
        if self.children:
            self.children[0] = agent
        else:
            self.children.append(agent)

    async def stop(self) -> None:
        self._stopping = True
        await super().stop()
        if self._task is not None:
            await asyncio.wait_for(self._task, 60)
            self._task = None


@dataclass(frozen=True)
class Prepared:
    """What the upgrade needs, made before the fleet starts."""

    install_root: pathlib.Path
    old: str
    new: str
    wheel: pathlib.Path  # the new version's, in the hub's artifact directory
    sha256: str


async def prepare(root: pathlib.Path, node: str, artifacts: pathlib.Path) -> Prepared:
    """Install this tree's agent for ``node`` under ``root/install`` and build the next
    version's wheel into ``artifacts`` (about a minute: pip builds and installs).

    Raises:
        DemoError: no source tree, install.sh or pip failed.
    """
    import subprocess

    work = root / "install"
    work.mkdir()
    try:
        old = current_version()
        new = bumped(old)
        roots = await install_roots(work, (node,), quiet=True)
        built = await asyncio.to_thread(build_wheel, work / "next", version=new, quiet=True)
    except subprocess.CalledProcessError as exc:
        tail = "\n".join(f"{exc.stdout or ''}{exc.stderr or ''}".splitlines()[-20:])
        raise DemoError(f"--upgrade: pip failed to build the agent's wheels:\n{tail}") from exc
    except (DevtoolsError, OSError) as exc:
        raise DemoError(f"--upgrade: the agent's install failed: {exc}") from exc
    # the venv has what it needs: the build's and wheelhouse's copies go (tens of MB)
    for leftover in ("wheel", "house"):
        shutil.rmtree(work / leftover, ignore_errors=True)
    wheel, digest = await asyncio.to_thread(_publish, built, artifacts)
    shutil.rmtree(work / "next", ignore_errors=True)
    return Prepared(roots[node], old, new, wheel, digest)


def _publish(built: pathlib.Path, artifacts: pathlib.Path) -> tuple[pathlib.Path, str]:
    """Copy ``built`` into the hub's artifact directory; its path there and sha256 (hex)."""
    artifacts.mkdir(parents=True, exist_ok=True)
    wheel = artifacts / built.name
    shutil.copyfile(built, wheel)
    return wheel, hashlib.sha256(wheel.read_bytes()).hexdigest()


def _containers(pods: list[dict[str, Any]], node: str) -> dict[str, tuple[str, int]]:
    """Each container of ``node``'s pods: ``pod/container`` -> (container id, restarts)."""
    found = {}
    for p in pods:
        if (p.get("spec") or {}).get("nodeName") != node:
            continue
        for c in (p.get("status") or {}).get("containerStatuses") or ():
            key = f"{p['metadata']['name']}/{c.get('name')}"
            found[key] = (str(c.get("containerID", "")), int(c.get("restartCount", 0)))
    return found


class UpgradePhase:
    """The upgrade phase; it uses the demo's state, fleet and client (``self.state``,
    ``self.agents``, ``self.client``, ``self._until``, ``self.event``)."""

    async def _upgrade(self, prepared: Prepared) -> None:
        agent = next(a for a in self.agents if isinstance(a, InstalledAgent))
        node, new = agent.node, prepared.new
        check = self.state.check(
            "upgrade",
            f"{node}'s agent {prepared.old} -> {new} by an EdgeUpgrade, no pod restart",
        )
        name = f"demo-agent-{new.replace('.', '-')}"
        started = time.monotonic()
        try:
            # rbac: operator's credentials (the embedded API's admin kubeconfig)
            before = _containers((await self.client.list(PODS, "default"))[0], node)
            await self._until(self._upgrades_served, 30, "edgeupgrades served")
            # rbac: operator's credentials (the embedded API's admin kubeconfig)
            await self.client.create(EDGEUPGRADES, self._edgeupgrade(name, node, prepared))
            self.event(f"upgrade: EdgeUpgrade {name}: {node} -> {new} ({prepared.wheel.name})")
            detail = await self._until(
                lambda: self._upgraded(name, node, new, before), UPGRADE_TIMEOUT, "the upgrade"
            )
        except (DemoError, HubError, OSError) as exc:
            check.fail(str(exc))
            self.event(f"✗ {check.what}: not converged: {exc}")
            return
        check.ok(detail, time.monotonic() - started)
        self.event(f"✓ {check.what} ({check.seconds:.1f} s) {detail}")

    async def _upgrades_served(self) -> bool:
        try:
            # rbac: operator's credentials (the embedded API's admin kubeconfig)
            await self.client.list(EDGEUPGRADES)
        except KubeAPIError:
            return False
        return True

    @staticmethod
    def _edgeupgrade(name: str, node: str, prepared: Prepared) -> dict[str, Any]:
        return {
            "apiVersion": "apps.edgefleet.io/v1alpha1",
            "kind": "EdgeUpgrade",
            "metadata": {"name": name},
            "spec": {
                "version": prepared.new,
                "artifact": {"sha256": prepared.sha256, "name": prepared.wheel.name},
                "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
                "maxUnavailable": 1,
                "healthGate": {"podsReady": True, "timeoutSeconds": 120},
                "failurePolicy": "Pause",
            },
        }

    async def _upgraded(
        self, name: str, node: str, new: str, before: dict[str, tuple[str, int]]
    ) -> str | None:
        """``None`` while the rollout runs; what converged once it is Completed.

        Raises:
            DemoError: the node rolled back or failed, or a pod of it restarted.
        """
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        obj = await self.client.get(EDGEUPGRADES, name)
        self.state.upgrade = obj
        status = obj.get("status") or {}
        entry = next((n for n in status.get("nodes") or () if n.get("name") == node), {})
        if entry.get("phase") in ("RolledBack", "Failed"):
            why = f"{entry.get('reason', '')} {entry.get('message', '')}".strip()
            raise DemoError(f"{node} {entry['phase']}: {why}")
        if status.get("phase") != "Completed" or entry.get("phase") != "Healthy":
            return None
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        reported = ((await self.client.get(NODES, node))["metadata"].get("annotations") or {}).get(
            AGENT_VERSION_ANNOTATION
        )
        if reported != new:
            return None
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        after = _containers((await self.client.list(PODS, "default"))[0], node)
        changed = [k for k, v in before.items() if after.get(k) != v]
        if changed:
            raise DemoError(f"pods restarted on {node}: {', '.join(changed)}")
        self.state.nodes[node]["version"] = reported
        return f"{node} Healthy on {reported}, {len(before)} container(s) kept running"
