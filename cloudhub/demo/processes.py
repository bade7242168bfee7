"""The demo's processes: the hub (``cloudhub serve``), agents (``edgeagent join`` then
``edgeagent run``) and mappers, each a child process with its log in the demo directory.

They run in the demo directory (their working directory), so that
:func:`cloudhub.devtools.fleet.sweep` can find every process the demo started, and every
process those started (the process runtime's pods), and end them by pid at the end.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from cloudhub.demo.errors import DemoError
from cloudhub.devtools.fleet import FAST_AGENT_SETS, Child, child_env, docker_agent_args, free_port

__all__ = ["AGENT_SETS", "HUB_FLAGS", "AgentProcess", "HubProcess"]

#: Hub settings of the demo: loopback only, heartbeats and grace periods short enough that
#: an outage is seen within seconds (seconds; production defaults in docs/hub.md).
HUB_FLAGS = {
    "nodes-lease-interval": "1",
    "nodes-lease-duration": "4",
    "nodes-not-ready-grace": "2",
    "nodes-status-report-interval": "2",
    "session-heartbeat-interval": "1",
    "session-liveness-timeout": "4",
    "session-close-timeout": "1",
    "status-retry-cap": "0.5",
    "observability-log-level": "info",
}

#: Agent settings of the demo (``--set``): the fleet's quick ones, an outage seen within
#: 4 s, and metrics every 2 s.
AGENT_SETS = (
    *FAST_AGENT_SETS,
    "hub.liveness_timeout=4",
    "metrics.sample_interval_s=2",
    "metrics.batch_interval_s=2",
)


class HubProcess(Child):
    """``python -m cloudhub serve`` on its embedded API, the PKI generating the CA."""

    def __init__(self, root: pathlib.Path, flags: dict[str, str] | None = None) -> None:
        """Args: ``root``, the demo's directory; ``flags``, more ``cloudhub serve`` flags
        (name without ``--``: value)."""
        self.root = root / "hub"
        self.root.mkdir(parents=True)
        self.session_port = free_port()
        self.join_port = free_port()
        self.http_port = free_port()
        self.api_port = free_port()
        args = [sys.executable, "-m", "cloudhub", "serve"]
        flags = {
            "kube-embedded-data-dir": str(self.root / "api"),
            "kube-embedded-port": str(self.api_port),
            "listen-quic-host": "127.0.0.1",
            "listen-quic-port": str(self.session_port),
            "listen-websocket-host": "127.0.0.1",
            "listen-websocket-port": str(self.session_port),
            "observability-http-host": "127.0.0.1",
            "observability-http-port": str(self.http_port),
            "pki-join-host": "127.0.0.1",
            "pki-join-port": str(self.join_port),
            "pki-session-port": str(self.session_port),
            "pki-server-names": "127.0.0.1,localhost",
            "pki-public-address": f"127.0.0.1:{self.join_port}",
            **HUB_FLAGS,
            **(flags or {}),
        }
        for key, value in flags.items():
            args += [f"--{key}", value]
        super().__init__("hub", args, root, root / "hub.log")

    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.root / "api" / "kubeconfig"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"

    async def wait_ready(self, timeout: float) -> None:
        """Until ``/readyz`` answers 200.

        Raises:
            DemoError: the hub exited or was not ready in time (with its log's tail).
        """
        url = f"http://127.0.0.1:{self.http_port}/readyz"
        deadline = time.monotonic() + timeout

        def probe() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                return False

        while not await asyncio.to_thread(probe):
            if not self.running:
                raise DemoError(f"the hub exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise DemoError(f"the hub was not ready within {timeout:.0f} s:\n{self.log_tail()}")
            await asyncio.sleep(0.2)


@dataclass
class AgentProcess:
    """One edge node: its directory, join, agent and mappers.

    Attributes:
        node: the node name.
        transports: the agent's ``hub.transports`` (``"quic"`` or ``"websocket"``).
        relay_port: where the agent dials (the demo's relay to the hub).
    """

    node: str
    root: pathlib.Path
    transports: str
    relay_port: int
    docker: dict[str, str] | None = None
    children: list[Child] = field(default_factory=list)

    @property
    def dir(self) -> pathlib.Path:
        return self.root / self.node

    @property
    def state(self) -> pathlib.Path:
        return self.dir / "state"

    @property
    def config(self) -> pathlib.Path:
        return self.dir / "config.yaml"

    @property
    def device_socket(self) -> pathlib.Path:
        return self.state / "devices.sock"

    @property
    def runtime(self) -> str:
        return "docker" if self.docker else "process"

    async def join(self, join_address: str, token: str, ca_hash: str, labels: str) -> None:
        """``edgeagent join`` with a bootstrap token: a key made here, a CSR, the pinned CA.

        Raises:
            DemoError: the join failed (its output is in the message).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            f"state_dir: {self.state}\nlog_level: INFO\nruntime:\n  kind: {self.runtime}\n"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "edgeagent",
            "join",
            "--hub",
            join_address,
            "--token",
            token,
            "--ca-cert-hash",
            ca_hash,
            "--node-name",
            self.node,
            "--labels",
            labels,
            "--config",
            str(self.config),
            env=child_env(),
            cwd=self.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        out, _ = await proc.communicate()
        (self.dir / "join.log").write_bytes(out)
        if proc.returncode != 0:
            raise DemoError(f"edgeagent join {self.node} failed: {out.decode(errors='replace')}")

    def start(self) -> None:
        """Start the agent, dialling the relay."""
        agent = Child(f"{self.node}/agent", self.agent_args(), self.root, self.dir / "agent.log")
        self.children = [agent]
        agent.start()

    def agent_args(self, python: str = sys.executable) -> list[str]:
        """``edgeagent run``'s command line, run by ``python``."""
        args = [
            python,
            "-m",
            "edgeagent",
            "run",
            "--config",
            str(self.config),
            "--hub",
            f"quic://127.0.0.1:{self.relay_port}",
            "--set",
            f"hub.transports={self.transports}",
        ]
        for item in AGENT_SETS:
            args += ["--set", item]
        if self.docker:
            args += ["--runtime", "docker"]
            args += docker_agent_args(
                self.docker["url"], self.docker["network"], self.docker["sandbox_image"]
            )
        else:
            args += ["--runtime", "process"]
        return args

    def start_mappers(self, sysfs_root: pathlib.Path) -> None:
        """Start the simulated and thermal mappers on the node's device API (once its
        socket exists); they look for new Devices every 2 s."""
        socket_arg = ["--socket", str(self.device_socket), "--resync", "2"]
        mappers = [
            Child(
                f"{self.node}/simulated-mapper",
                [sys.executable, "-m", "edgeagent.mappers.simulated", *socket_arg],
                self.root,
                self.dir / "simulated-mapper.log",
            ),
            Child(
                f"{self.node}/thermal-mapper",
                [
                    sys.executable,
                    "-m",
                    "edgeagent.mappers.thermal",
                    *socket_arg,
                    "--sysfs-root",
                    str(sysfs_root),
                    "--interval",
                    "2",
                ],
                self.root,
                self.dir / "thermal-mapper.log",
            ),
        ]
        self.children.extend(mappers)
        for child in mappers:
            child.start()

    @property
    def agent(self) -> Child | None:
        return self.children[0] if self.children else None

    async def status(self) -> dict[str, Any] | None:
        """``edgeagent status --json``: what the node's own store says (pods, objects)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "edgeagent",
            "status",
            "--json",
            "--config",
            str(self.config),
            env=child_env(),
            cwd=self.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            return None
        try:
            return json.loads(out)
        except ValueError:
            return None

    async def stop(self) -> None:
        await asyncio.gather(*(child.stop() for child in reversed(self.children)))
