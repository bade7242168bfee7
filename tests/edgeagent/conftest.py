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
        "[storage]\n"
        'driver = "vfs"\n'
        f'graphroot = "{root}/graph"\n'
        f'runroot = "{root}/run"\n'
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
    log = open(root / "service.log", "w")  # noqa: SIM115 - closed at teardown
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
                pytest.skip(f"podman system service did not start: {(root / 'service.log').read_text()}")
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

