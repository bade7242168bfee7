"""Fixtures for the edge agent tests: a private podman engine and agent building blocks.

The podman engine is session-scoped and private to this test session: its own
``containers.conf`` (cgroupfs, runc, explicit nofile/nproc ulimits), storage root,
run/tmp directories, network config directory and a bridge network with a random subnet
and interface name, so that parallel test sessions on one machine never collide. The
image ``localhost/busybox:latest`` is made from the host's static busybox with ``podman
import`` (no registry is reachable). ``podman system service`` serves the Docker API on a
Unix socket. Tests that need it skip, with the reason, only where podman cannot run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import uuid

import pytest

from tests.edgeagent.podman_engine import (
    BUSYBOX_IMAGE,
    EngineUnavailable,
    PodmanEngine,
    docker_settings,
    start_engine,
    stop_engine,
)
from tests.environment import missing
from tests.waiting import eventually

__all__ = ["BUSYBOX_IMAGE", "PodmanEngine", "docker_settings"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def podman_engine(tmp_path_factory: pytest.TempPathFactory):
    """A private podman engine serving the Docker API; skips where podman cannot run."""
    try:
        engine = start_engine(tmp_path_factory.mktemp("podman"))
    except EngineUnavailable as exc:
        missing(str(exc), "scripts/setup.sh test installs podman")
    try:
        yield engine
    finally:
        stop_engine(engine)


@pytest.fixture
def podman(podman_engine: PodmanEngine):
    """The session's podman engine (each test removes its containers; the session's
    teardown removes anything left)."""
    return podman_engine


@pytest.fixture
def python_env() -> dict[str, str]:
    """Environment for subprocesses that import this worktree's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# --- an in-process agent core: store + runtime + reconciler -----------------------------

TEST_POD_SETTINGS = dict(
    backoff_initial=0.4, backoff_max=3.2, resync_period=2.0, default_grace_period=5.0
)


@dataclasses.dataclass
class Ref:
    kind: str
    namespace: str
    name: str
    uid: str


def damage_store(path: pathlib.Path) -> None:
    """Overwrite a closed store's header and first pages, as a failing SD card would."""
    with open(path, "r+b") as f:
        f.write(b"\x00garbage" * 512)


def make_pod(name: str, containers: list[dict], namespace: str = "default", **spec) -> dict:
    """A Pod object as the hub would send it (uid made up)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {"containers": containers, "nodeName": "edge-test", **spec},
    }


def container(name: str, script: str, runtime_kind: str, **extra) -> dict:
    """A busybox container running a shell script, in both runtimes."""
    return {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", script],
        **extra,
    }


class Harness:
    """The agent's store, runtime and pod reconciler, running in this event loop —
    objects are put into the store as the uplink would."""

    def __init__(self, state_dir: pathlib.Path, runtime, settings) -> None:
        from edgeagent.store import Store

        self.state_dir = state_dir
        self.settings = settings
        self.runtime = runtime
        self.kind = runtime.kind
        self.store = Store.open(settings.store_path, settings.store)
        self._task: asyncio.Task | None = None
        self.reconciler = None

    async def start(self) -> None:
        from edgeagent.pods import PodReconciler

        await self.runtime.connect()
        self.reconciler = PodReconciler(
            self.store, self.runtime, self.settings, node_name="edge-test", host_ip="127.0.0.1"
        )
        self._task = asyncio.create_task(self.reconciler.run(), name="test-reconciler")

    async def stop(self) -> None:
        """Stop the reconciler like an agent exit: containers keep running."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def apply(self, obj: dict) -> dict:
        meta = obj["metadata"]
        ref = Ref(obj.get("kind", "Pod"), meta.get("namespace", ""), meta["name"], meta["uid"])
        rv = str(int(meta.get("resourceVersion", "0")) + 1)
        meta["resourceVersion"] = rv
        self.store.apply_upsert(ref, rv, obj)
        return obj

    def apply_config(
        self, kind: str, name: str, data: dict, namespace: str = "default", uid: str | None = None
    ) -> dict:
        import base64

        body = (
            {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
            if kind == "Secret"
            else dict(data)
        )
        return self.apply(
            {
                "kind": kind,
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": uid or f"{kind.lower()}-{name}-{namespace}",
                },
                "data": body,
            }
        )

    def status(self, pod: dict) -> dict:
        return self.store.pod_status(pod["metadata"]["uid"]) or {}

    def container_status(self, pod: dict, name: str) -> dict:
        for cs in self.status(pod).get("containerStatuses") or []:
            if cs["name"] == name:
                return cs
        return {}

    def events(self, pod: dict) -> list[dict]:
        uid = pod["metadata"]["uid"]
        return [
            e.body
            for e in self.store.outbox_pending()
            if e.kind == "event" and e.body["ref"]["uid"] == uid
        ]

    async def wait_phase(self, pod: dict, phase: str, timeout: float = 30.0) -> dict:
        await eventually(
            lambda: self.status(pod).get("phase") == phase,
            timeout=timeout,
            what=f"{pod['metadata']['name']} {phase} (now {self.status(pod)})",
        )
        return self.status(pod)

    async def wait_ready(self, pod: dict, timeout: float = 30.0) -> dict:
        def ready():
            conds = {c["type"]: c["status"] for c in self.status(pod).get("conditions") or []}
            return conds.get("Ready") == "True"

        await eventually(ready, timeout=timeout, what=f"{pod['metadata']['name']} Ready")
        return self.status(pod)

    async def logs(self, pod: dict, name: str) -> str:
        from edgeagent.runtime import Labels

        infos = await self.runtime.list(
            {Labels.POD_UID: pod["metadata"]["uid"], Labels.CONTAINER_NAME: name}
        )
        infos.sort(key=lambda i: int(i.labels[Labels.RESTART_COUNT]))
        if not infos:
            return ""
        path = self.runtime.log_path(infos[-1])
        text = await asyncio.to_thread(_read_text, path)
        if self.kind == "docker":
            # podman's k8s-file format: "<time> <stream> <F|P> <text>" per line
            text = "".join(
                line.split(" ", 3)[3] + "\n" for line in text.splitlines() if line.count(" ") >= 3
            )
        return text

    def path(self, path: str) -> str:
        """A mount path as a container command sees it (the process runtime has no file
        system isolation: mount paths are relative to its working directory)."""
        return path if self.kind == "docker" else path.lstrip("/")

    async def exec(self, pod: dict, name: str, script: str) -> str:
        from edgeagent.runtime import Labels

        infos = await self.runtime.list(
            {Labels.POD_UID: pod["metadata"]["uid"], Labels.CONTAINER_NAME: name}
        )
        infos.sort(key=lambda i: int(i.labels[Labels.RESTART_COUNT]))
        result = await self.runtime.exec(infos[-1].id, ["/bin/sh", "-c", script], timeout=10)
        assert result.exit_code == 0, result
        return result.output.decode()

    async def close(self, remove_containers: bool = True) -> None:
        await self.stop()
        if remove_containers:
            from edgeagent.errors import ContainerRuntimeError
            from edgeagent.runtime import Labels

            errors: list[ContainerRuntimeError] = []

            async def removed() -> bool:
                try:
                    infos = await self.runtime.list()
                    for info in sorted(
                        infos, key=lambda i: i.labels.get(Labels.CONTAINER_TYPE) == "sandbox"
                    ):
                        await self.runtime.remove(info.id)
                except ContainerRuntimeError as exc:  # the engine is still busy stopping one
                    errors.append(exc)
                    return False
                return True

            await eventually(removed, "every container removed", 30, state=lambda: errors[-1:])
        await self.runtime.close()
        self.store.close()


def _read_text(path: str) -> str:
    if not path or not os.path.exists(path):
        return ""
    return pathlib.Path(path).read_text(errors="replace")


def make_runtime_for(kind: str, state_dir: pathlib.Path, engine: PodmanEngine | None):
    from edgeagent.runtime.process import ProcessRuntime
    from edgeagent.settings import ProcessSettings

    if kind == "docker":
        from edgeagent.runtime.docker import DockerRuntime

        return DockerRuntime(docker_settings(engine), host_ip="127.0.0.1")
    return ProcessRuntime(state_dir / "runtime" / "process", ProcessSettings(), "127.0.0.1")


def agent_settings(state_dir: pathlib.Path, kind: str, engine: PodmanEngine | None = None, **pods):
    from edgeagent.settings import AgentSettings, PodSettings, RuntimeSettings

    runtime = (
        RuntimeSettings(kind=kind, docker=docker_settings(engine))
        if engine
        else RuntimeSettings(kind=kind)
    )
    return AgentSettings(
        node_name="edge-test",
        state_dir=state_dir,
        node_ip="127.0.0.1",
        runtime=runtime,
        pods=PodSettings(**{**TEST_POD_SETTINGS, **pods}),
    )


@pytest.fixture(params=["process", "docker"])
def runtime_kind(request) -> str:
    """Run a test against the process runtime and against podman's Docker API."""
    return request.param


@pytest.fixture
async def harness(runtime_kind: str, tmp_path: pathlib.Path, request):
    engine = request.getfixturevalue("podman") if runtime_kind == "docker" else None
    settings = agent_settings(tmp_path / "state", runtime_kind, engine)
    h = Harness(
        tmp_path / "state", make_runtime_for(runtime_kind, tmp_path / "state", engine), settings
    )
    await h.start()
    try:
        yield h
    finally:
        await h.close()
