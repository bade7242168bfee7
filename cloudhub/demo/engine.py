"""A private podman engine serving the Docker API: for ``cloudhub demo``, tests and benchmarks.

Everything is private to one engine: its own ``containers.conf`` (cgroupfs, runc, explicit
nofile/nproc ulimits), storage root (vfs), run/tmp directories, network config directory
and a bridge network with a random subnet and interface name, so that parallel sessions
on one machine never collide. ``localhost/busybox:latest`` is made from the host's static
busybox with ``podman import`` (no registry is reachable).
"""

from __future__ import annotations

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

from cloudhub.demo.errors import DemoError

__all__ = [
    "BUSYBOX_IMAGE",
    "EngineUnavailable",
    "PodmanEngine",
    "start_engine",
    "stop_engine",
    "unavailable_reason",
]

BUSYBOX_IMAGE = "localhost/busybox:latest"


class EngineUnavailable(DemoError):
    """podman cannot run here (the reason is the message)."""


@dataclasses.dataclass(frozen=True)
class PodmanEngine:
    """A running private podman service."""

    url: str
    env: dict[str, str]
    network: str
    image: str
    root: pathlib.Path
    service: subprocess.Popen | None = None

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


def unavailable_reason() -> str | None:
    """Why podman cannot run here, or ``None``."""
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/install-dev.sh installs it)"
    if not (shutil.which("busybox") or os.path.exists("/bin/busybox")):
        return "no static busybox to build the test image from (apt-get install busybox-static)"
    if os.geteuid() != 0:
        return "the podman tests run rootful podman and need root"
    return None


def start_engine(root: pathlib.Path) -> PodmanEngine:
    """Configure, populate and start a private podman service below ``root``.

    Raises:
        EngineUnavailable: podman is missing or cannot run here.
    """
    reason = unavailable_reason()
    if reason:
        raise EngineUnavailable(reason)
    tag = uuid.uuid4().hex[:6]
    conf = root / "containers.conf"
    storage = root / "storage.conf"
    netdir = root / "networks"
    netdir.mkdir(parents=True)
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
    env = {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}
    env.pop("CONTAINER_HOST", None)
    sock = root / "podman.sock"
    engine = PodmanEngine(
        url=f"unix://{sock}", env=env, network=f"eftest{tag}", image=BUSYBOX_IMAGE, root=root
    )
    try:
        engine.podman("info", timeout=60)
    except Exception as exc:
        raise EngineUnavailable(f"podman cannot run here: {exc}") from exc
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
    with open(root / "service.log", "w") as log:
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{sock}"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    engine = dataclasses.replace(engine, service=service)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if service.poll() is not None or time.monotonic() > deadline:
            stop_engine(engine)
            raise EngineUnavailable(
                f"podman system service did not start: {(root / 'service.log').read_text()}"
            )
        time.sleep(0.05)
    return engine


def stop_engine(engine: PodmanEngine) -> None:
    """Remove every container, stop the service, remove the network."""
    engine.podman("rm", "-af", "-t", "0", check=False, timeout=120)
    if engine.service is not None:
        engine.service.terminate()
        try:
            engine.service.wait(timeout=15)
        except subprocess.TimeoutExpired:
            engine.service.kill()
            engine.service.wait()
    engine.podman("network", "rm", "-f", engine.network, check=False)
