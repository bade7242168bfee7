"""End-to-end pieces: the embedded API, a real hub on it, real agents as processes.

- :class:`HubRunner`: ``cloudhub.hub.Hub`` in the test's process on the embedded API,
  on one fixed port for QUIC (UDP) and WebSocket (TCP), so that it can be stopped and
  started again where the agents expect it (a hub outage).
- :class:`AgentProcess`: ``python -m edgeagent run`` with a node certificate from the
  test CA in ``<state>/pki`` (where ``edgeagent join`` puts it) and ``hub.url`` set; its
  log goes to a file shown when a test fails.
- :func:`eventually`: poll a condition (the API, the agent's store) until it holds.

Also used by the end-to-end benchmark (``tests/bench/bench_e2e.py``), which runs the hub
in a process of its own instead.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from cloudhub.devtools.fleet import (
    FAST_AGENT_SETS,
    docker_agent_args,
    free_port,  # noqa: F401  re-exported for the tests
)
from protocol import pki
from tests.waiting import eventually as eventually  # re-exported: the one polling helper

ROOT = pathlib.Path(__file__).resolve().parents[3]

#: Hub settings for tests: loopback, short intervals (seconds).
HUB_TEST_SETTINGS: dict[str, Any] = {
    "listen.quic_host": "127.0.0.1",
    "listen.websocket_host": "127.0.0.1",
    "observability.http_host": "127.0.0.1",
    "observability.http_port": 0,
    "nodes.lease_interval": 1.0,
    "nodes.lease_duration": 4,
    "nodes.not_ready_grace": 3.0,
    "nodes.status_report_interval": 2.0,
    "session.heartbeat_interval": 2.0,
    "session.liveness_timeout": 10.0,
    "session.close_timeout": 1.0,
    "status.retry_cap": 0.5,
}

#: Agent settings for tests: the fleet's quick back-offs and commits (the demo's too), and
#: 10 s of silence before the hub is declared dead on a loaded machine.
AGENT_TEST_SETS = (*FAST_AGENT_SETS, "hub.liveness_timeout=10")


class HubRunner:
    """A hub on the embedded API at ``kubeconfig``, in this process, on ``port``.

    Args:
        kubeconfig: the embedded API server's kubeconfig.
        credentials: the hub's server credentials (``TestPKI.server``).
        port: the session port (QUIC on UDP, WebSocket on TCP).
        extensions: ``settings -> [extension, ...]``, called at every start (fresh
            extension objects for every hub), e.g. the device twins.
    """

    def __init__(
        self,
        kubeconfig: pathlib.Path,
        credentials: Any,
        port: int,
        *,
        extensions: Callable[[Any], list[Any]] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.credentials = credentials
        self.port = port
        self.extensions = extensions
        self.hub: Any = None

    @property
    def url(self) -> str:
        return f"quic://127.0.0.1:{self.port}"

    async def start(self, **overrides: Any) -> Any:
        from cloudhub.hub import Hub
        from cloudhub.settings import load_hub_settings

        values = {
            **HUB_TEST_SETTINGS,
            "kube.kubeconfig": str(self.kubeconfig),
            "listen.quic_port": self.port,
            "listen.websocket_port": self.port,
            **overrides,
        }
        settings = load_hub_settings(overrides=values)
        extensions = self.extensions(settings) if self.extensions is not None else None
        hub = Hub(settings, credentials=self.credentials, extensions=extensions)
        try:
            await hub.start()
        except BaseException:
            await hub.aclose()
            raise
        self.hub = hub
        return hub

    async def stop(self) -> None:
        hub, self.hub = self.hub, None
        if hub is not None:
            await hub.aclose()


def write_node_pki(directory: pathlib.Path, ca: pki.CertificateAuthority, node: str) -> None:
    """What ``edgeagent join`` leaves: ``ca.crt``, ``node.crt``, ``node.key`` (0600)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = pki.generate_private_key()
    cert = pki.sign_node_csr(ca, pki.build_node_csr(node, key), lifetime=86400, now=time.time())
    (directory / "ca.crt").write_bytes(pki.dump_certificate_pem(ca.certificate))
    (directory / "node.crt").write_bytes(pki.dump_certificate_pem(cert))
    key_path = directory / "node.key"
    key_path.write_bytes(pki.dump_private_key_pem(key))
    os.chmod(key_path, 0o600)


class AgentProcess:
    """``python -m edgeagent run`` for one node.

    Args:
        root: a directory for this agent (state, config, log).
        node: the node name.
        kind: ``"process"`` or ``"docker"``.
        hub_url: the hub's address (``None``: no hub configured).
        ca: the test CA (a node certificate is issued into ``<state>/pki``).
        engine: the podman engine for ``kind == "docker"``.
        sets: more ``--set KEY=VALUE`` settings.
        quick: add the tests' short back-offs and commit delay (``AGENT_TEST_SETS``);
            ``False`` runs with production defaults (benchmarks).
    """

    def __init__(
        self,
        root: pathlib.Path,
        node: str,
        kind: str,
        hub_url: str | None,
        ca: pki.CertificateAuthority | None,
        *,
        engine: Any = None,
        sets: tuple[str, ...] = (),
        quick: bool = True,
    ) -> None:
        self.root = root
        self.node = node
        self.kind = kind
        self.hub_url = hub_url
        self.engine = engine
        self.sets = (AGENT_TEST_SETS if quick else ("node_ip=127.0.0.1",)) + tuple(sets)
        self.state = root / "state"
        self.config = root / "config.yaml"
        self.log_path = root / "agent.log"
        self.proc: subprocess.Popen | None = None
        self.start_env: dict[str, str] = {}
        """More environment for the process (e.g. ``NOTIFY_SOCKET``)."""
        root.mkdir(parents=True, exist_ok=True)
        self.config.write_text("log_level: INFO\n")
        if ca is not None:
            write_node_pki(self.state / "pki", ca, node)

    def args(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "edgeagent",
            "run",
            "--config",
            str(self.config),
            "--state-dir",
            str(self.state),
            "--node-name",
            self.node,
            "--runtime",
            self.kind,
        ]
        if self.hub_url:
            args += ["--hub", self.hub_url]
        for item in self.sets:
            args += ["--set", item]
        if self.kind == "docker":
            from tests.edgeagent.podman_engine import docker_settings

            ds = docker_settings(self.engine)
            args += docker_agent_args(ds.url, ds.network, ds.sandbox_image)
        return args

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("NOTIFY_SOCKET", None)
        env.update(self.start_env)
        with open(self.log_path, "a") as log:
            log.write(f"--- start {time.strftime('%H:%M:%S')} ---\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.args(), env=env, stdout=log, stderr=log, cwd=ROOT, start_new_session=True
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait (pods keep running), without blocking the event loop (the hub
        in this process must answer the agent's close)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(proc.wait, timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise

    def kill(self) -> None:
        """SIGKILL, as a crash or a power cut would (pods keep running)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def read_store(self, reader: Callable[[Any], Any]) -> Any:
        """``reader(store)`` on a read-only view of the agent's store."""
        from edgeagent.store import Store

        if not (self.state / "store.db").exists():
            return None
        store = Store.open_readonly(self.state / "store.db")
        try:
            # The agent made the file but has not committed its first migration yet (a few
            # milliseconds at its start; a loaded machine catches it): nothing to read.
            if store.schema_version() == 0:
                return None
            return reader(store)
        finally:
            store.close()

    def hub_session(self) -> dict:
        return self.read_store(lambda s: s.get_state("hub.session") or {}) or {}

    async def remove_everything(self) -> None:
        """Remove every container or process of this agent's pods ("a reboot")."""
        runtime = self._runtime()
        await runtime.connect()
        try:
            from edgeagent.runtime import Labels

            infos = await runtime.list()
            for info in sorted(
                infos, key=lambda i: i.labels.get(Labels.CONTAINER_TYPE) == "sandbox"
            ):
                await runtime.remove(info.id)
        finally:
            await runtime.close()

    async def running_pods(self) -> set[str]:
        """Uids of pods with a running app container, seen from outside the agent."""
        from edgeagent.runtime import ContainerState, Labels

        runtime = self._runtime()
        await runtime.connect()
        try:
            return {
                i.labels[Labels.POD_UID]
                for i in await runtime.list()
                if i.state is ContainerState.RUNNING
                and i.labels.get(Labels.CONTAINER_TYPE) == "app"
            }
        finally:
            await runtime.close()

    def _runtime(self) -> Any:
        if self.kind == "docker":
            from edgeagent.runtime.docker import DockerRuntime
            from tests.edgeagent.podman_engine import docker_settings

            return DockerRuntime(docker_settings(self.engine), host_ip="127.0.0.1")
        from edgeagent.runtime.process import ProcessRuntime
        from edgeagent.settings import ProcessSettings

        return ProcessRuntime(self.state / "runtime" / "process", ProcessSettings(), "127.0.0.1")


def unique(name: str) -> str:
    """A name unique to this run."""
    return f"{name}-{uuid.uuid4().hex[:6]}"
