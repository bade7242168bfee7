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
import hashlib
import io
import json
import os
import pathlib
import random
import shutil
import subprocess
import tarfile
import time
import uuid

import pytest

BUSYBOX_IMAGE = "localhost/busybox:latest"
ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class PodmanEngine:
    """A running private podman service."""

    url: str
    env: dict[str, str]
    network: str
    image: str
    root: pathlib.Path

    def podman(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout


def _busybox_tar(path: pathlib.Path) -> None:
    busybox = shutil.which("busybox") or "/bin/busybox"
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True).stdout.split()
    with tarfile.open(path, "w") as tar:
        for d in ("bin", "etc", "tmp", "var", "var/www", "root", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add(busybox, arcname="bin/busybox")
        for applet in applets:
            if applet == "busybox":
                continue
            info = tarfile.TarInfo("bin/" + applet)
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            tar.addfile(info)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))


def _podman_unavailable() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/install-dev.sh installs it)"
    if not (shutil.which("busybox") or os.path.exists("/bin/busybox")):
        return "no static busybox to build the test image from (apt-get install busybox-static)"
    if os.geteuid() != 0:
        return "the podman tests run rootful podman and need root"
    return None


@pytest.fixture(scope="session")
def podman_engine(tmp_path_factory: pytest.TempPathFactory):
    """A private podman engine serving the Docker API; skips where podman cannot run."""
    reason = _podman_unavailable()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("podman")
    tag = uuid.uuid4().hex[:6]
    conf = root / "containers.conf"
    storage = root / "storage.conf"
    netdir = root / "networks"
    netdir.mkdir()
    conf.write_text(
        "[containers]\n"
        'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
        "[engine]\n"
        'cgroup_manager = "cgroupfs"\n'
        'runtime = "runc"\n'
        'events_logger = "file"\n'
        f'events_logfile_path = "{root}/events.log"\n'
        f'tmp_dir = "{root}/tmp"\n'
        "[network]\n"
        f'network_config_dir = "{netdir}"\n'
    )
    storage.write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n'
    )
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(conf),
        "CONTAINERS_STORAGE_CONF": str(storage),
    }
    env.pop("CONTAINER_HOST", None)
    sock = root / "podman.sock"
    engine = PodmanEngine(
        url=f"unix://{sock}", env=env, network=f"eftest{tag}", image=BUSYBOX_IMAGE, root=root
    )
    try:
        engine.podman("info", timeout=60)
    except Exception as exc:
        pytest.skip(f"podman cannot run here: {exc}")
    # The network file is written directly: podman 4.3 has no --interface-name, and a
    # unique bridge name keeps parallel sessions off each other's interface.
    prefix = f"10.{random.randint(200, 249)}.{random.randint(0, 255)}"
    (netdir / f"{engine.network}.json").write_text(
        json.dumps(
            {
                "name": engine.network,
                "id": hashlib.sha256(engine.network.encode()).hexdigest(),
                "driver": "bridge",
                "network_interface": f"ef{tag}",
                "created": "2024-01-01T00:00:00Z",
                "subnets": [{"subnet": f"{prefix}.0/24", "gateway": f"{prefix}.1"}],
                "ipv6_enabled": False,
                "internal": False,
                "dns_enabled": False,
                "ipam_options": {"driver": "host-local"},
            }
        )
    )
    engine.podman("network", "inspect", engine.network)
    tar = root / "busybox.tar"
    _busybox_tar(tar)
    engine.podman("import", "--change", 'CMD ["/bin/sh"]', str(tar), BUSYBOX_IMAGE)
    log = open(root / "service.log", "w")
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                pytest.skip(
                    f"podman system service did not start: {(root / 'service.log').read_text()}"
                )
            time.sleep(0.05)
        yield engine
    finally:
        engine.podman("rm", "-af", "-t", "0", check=False, timeout=120)
        service.terminate()
        try:
            service.wait(timeout=15)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        log.close()
        engine.podman("network", "rm", "-f", engine.network, check=False)


@pytest.fixture
def podman(podman_engine: PodmanEngine):
    """The session's podman engine; containers a test leaves behind are removed after it."""
    yield podman_engine
    podman_engine.podman("rm", "-af", "-t", "0", check=False)


def docker_settings(engine: PodmanEngine):
    from edgeagent.settings import DockerSettings

    return DockerSettings(
        url=engine.url,
        network=engine.network,
        sandbox_image=engine.image,
        sandbox_command=("sleep", "2147483647"),
        api_timeout=60.0,
    )


@pytest.fixture
def python_env() -> dict[str, str]:
    """Environment for subprocesses that import this worktree's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


async def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = ""):
    """Await until ``predicate()`` (sync or async) is truthy; return its value or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(interval)


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
        await wait_until(
            lambda: self.status(pod).get("phase") == phase,
            timeout=timeout,
            what=f"{pod['metadata']['name']} {phase} (now {self.status(pod)})",
        )
        return self.status(pod)

    async def wait_ready(self, pod: dict, timeout: float = 30.0) -> dict:
        def ready():
            conds = {c["type"]: c["status"] for c in self.status(pod).get("conditions") or []}
            return conds.get("Ready") == "True"

        await wait_until(ready, timeout=timeout, what=f"{pod['metadata']['name']} Ready")
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
            from edgeagent.runtime import Labels

            infos = await self.runtime.list()
            for info in sorted(
                infos, key=lambda i: i.labels.get(Labels.CONTAINER_TYPE) == "sandbox"
            ):
                await self.runtime.remove(info.id)
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
