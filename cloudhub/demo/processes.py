"""The demo's processes: the hub (``cloudhub serve``), agents (``edgeagent join`` then
``edgeagent run``) and mappers, each a child process with its log in the demo directory.

They run in the demo directory (their working directory), so that :func:`sweep` can find
every process the demo started, and every process those started (the process runtime's
pods), and end them by pid at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from cloudhub.demo.errors import DemoError

__all__ = [
    "AgentProcess",
    "Child",
    "HubProcess",
    "free_port",
    "sweep",
]

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

#: Agent settings of the demo (``--set``): quick commits, back-offs and metrics.
AGENT_SETS = (
    "store.commit_delay=0.1",
    "node_ip=127.0.0.1",
    "pods.backoff_initial=0.4",
    "pods.backoff_max=3",
    "pods.resync_period=2",
    "pods.default_grace_period=5",
    "hub.backoff_base=0.2",
    "hub.backoff_cap=1",
    "hub.healthy_after=1",
    "hub.quic_handshake_timeout=3",
    "hub.quic_retry_first=1",
    "hub.liveness_timeout=4",
    "metrics.sample_interval_s=2",
    "metrics.batch_interval_s=2",
)


def free_port() -> int:
    """A loopback port free for both TCP and UDP (a session port carries both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise DemoError("no loopback port free for both TCP and UDP")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("NOTIFY_SOCKET", None)
    return env


@dataclass
class Child:
    """One child process with its log file."""

    name: str
    args: list[str]
    cwd: pathlib.Path
    log_path: pathlib.Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                env=_env(),
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)


class HubProcess(Child):
    """``python -m cloudhub serve`` on its embedded API, the PKI generating the CA."""

    def __init__(self, root: pathlib.Path) -> None:
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
            env=_env(),
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
        args = [
            sys.executable,
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
            args += ["--runtime", "docker", "--docker-url", self.docker["url"]]
            for key in ("network", "sandbox_image"):
                args += ["--set", f"runtime.docker.{key}={self.docker[key]}"]
            args += ["--set", "runtime.docker.sandbox_command=sleep,2147483647"]
        else:
            args += ["--runtime", "process"]
        agent = Child(f"{self.node}/agent", args, self.root, self.dir / "agent.log")
        self.children = [agent]
        agent.start()

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
            env=_env(),
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


def _under(pid: int, root: str) -> bool:
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd == root or cwd.startswith(root + os.sep)


def sweep(root: pathlib.Path, timeout: float = 5.0) -> list[int]:
    """End every process whose working directory is inside ``root``: what the demo
    started and what those started (the process runtime's pods run in their container
    directory below an agent's state directory). SIGTERM, then SIGKILL after ``timeout``.

    Returns:
        The pids that were still running and were signalled.
    """
    resolved = str(root.resolve())
    me = os.getpid()
    found = [
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and int(p) != me and _under(int(p), resolved)
    ]
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    alive = list(found)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in alive if _under(pid, resolved)]
    for pid in alive:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return found
