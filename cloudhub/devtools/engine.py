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

from cloudhub.devtools.errors import DevtoolsError

__all__ = [
    "BUSYBOX_IMAGE",
    "NETWORK_BACKENDS",
    "EngineUnavailable",
    "PodmanEngine",
    "start_engine",
    "stop_engine",
    "unavailable_reason",
]

BUSYBOX_IMAGE = "localhost/busybox:latest"


class EngineUnavailable(DevtoolsError):
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
    network_backend: str = ""
    """``netavark`` or ``cni``: what podman uses for the engine's network."""

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
        return "podman is not installed (scripts/setup.sh demo installs it)"
    if not (shutil.which("busybox") or os.path.exists("/bin/busybox")):
        return "no static busybox to build the test image from (apt-get install busybox-static)"
    if os.geteuid() != 0:
        return "the podman tests run rootful podman and need root"
    return None


NETWORK_BACKENDS = ("netavark", "cni")


def _network_file(backend: str, name: str, bridge: str, prefix: str) -> tuple[str, dict]:
    """The file name and JSON that declare one bridge network for ``backend``.

    Written directly rather than with ``podman network create``: podman 4.3 has no
    ``--interface-name``, and a unique bridge name keeps parallel engines on one machine off
    each other's interface. Formats: netavark's network JSON (podman 4's
    ``libnetwork/types.Network``) and a CNI 0.4.0 conflist with the plugins podman's own
    ``network create`` writes (bridge with host-local IPAM, portmap, firewall, tuning).
    """
    subnet, gateway = f"{prefix}.0/24", f"{prefix}.1"
    if backend == "netavark":
        return f"{name}.json", {
            "name": name,
            "id": hashlib.sha256(name.encode()).hexdigest(),
            "driver": "bridge",
            "network_interface": bridge,
            "created": "2024-01-01T00:00:00Z",
            "subnets": [{"subnet": subnet, "gateway": gateway}],
            "ipv6_enabled": False,
            "internal": False,
            "dns_enabled": False,
            "ipam_options": {"driver": "host-local"},
        }
    return f"{name}.conflist", {
        "cniVersion": "0.4.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "ranges": [[{"subnet": subnet, "gateway": gateway}]],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "firewall", "backend": ""},
            {"type": "tuning"},
        ],
    }


def start_engine(
    root: pathlib.Path,
    *,
    network_backend: str | None = None,
    insecure_registries: tuple[str, ...] = (),
) -> PodmanEngine:
    """Configure, populate and start a private podman service below ``root``.

    The engine uses whichever network backend podman picks here (``podman info`` says:
    netavark where it is installed, else CNI, as on a stock Debian 12), unless
    ``network_backend`` asks for one. Before returning it runs one container on its network,
    so an engine that is returned can run pods.

    Args:
        root: an empty directory for the engine's configuration, storage and socket.
        network_backend: ``"netavark"``, ``"cni"`` or ``None`` (podman's choice).
        insecure_registries: ``host:port`` of registries the engine reaches over plain HTTP
            (a local test registry); the engine's own ``registries.conf`` lists them.

    Raises:
        EngineUnavailable: podman is missing or cannot run a container here; the message is
            one line saying why.
    """
    reason = unavailable_reason()
    if reason:
        raise EngineUnavailable(reason)
    if network_backend is not None and network_backend not in NETWORK_BACKENDS:
        raise ValueError(f"network_backend must be one of {NETWORK_BACKENDS}")
    tag = uuid.uuid4().hex[:6]
    conf = root / "containers.conf"
    storage = root / "storage.conf"
    netdir = root / "networks"
    netdir.mkdir(parents=True)
    backend_line = f'network_backend = "{network_backend}"\n' if network_backend else ""
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
        f"{backend_line}"
        f'network_config_dir = "{netdir}"\n'
    )
    storage.write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n'
    )
    registries = root / "registries.conf"
    registries.write_text(
        "unqualified-search-registries = []\n"
        + "".join(
            f'[[registry]]\nlocation = "{location}"\ninsecure = true\n'
            for location in insecure_registries
        )
    )
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(conf),
        "CONTAINERS_STORAGE_CONF": str(storage),
        "CONTAINERS_REGISTRIES_CONF": str(registries),
    }
    env.pop("CONTAINER_HOST", None)
    sock = root / "podman.sock"
    engine = PodmanEngine(
        url=f"unix://{sock}", env=env, network=f"eftest{tag}", image=BUSYBOX_IMAGE, root=root
    )
    try:
        backend = engine.podman("info", "--format", "{{.Host.NetworkBackend}}", timeout=60).strip()
        if backend not in NETWORK_BACKENDS:
            raise EngineUnavailable(
                f"podman uses the network backend {backend!r}, not netavark or CNI"
            )
        prefix = f"10.{random.randint(200, 249)}.{random.randint(0, 255)}"
        name, body = _network_file(backend, engine.network, f"ef{tag}", prefix)
        (netdir / name).write_text(json.dumps(body))
        engine.podman("network", "inspect", engine.network)
        tar = root / "busybox.tar"
        _busybox_tar(tar)
        engine.podman("import", "--change", 'CMD ["/bin/sh"]', str(tar), BUSYBOX_IMAGE)
        # One container on the network: a podman that cannot start containers here (no
        # cgroups, no runc, a backend whose plugins are missing) is found now, not by a pod.
        engine.podman(
            "run", "--rm", "--network", engine.network, BUSYBOX_IMAGE, "true", timeout=120
        )
    except EngineUnavailable:
        _remove_network(engine)
        raise
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        _remove_network(engine)
        raise EngineUnavailable(f"podman cannot run a container here: {_one_line(exc)}") from exc
    with open(root / "service.log", "w") as log:
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{sock}"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    engine = dataclasses.replace(engine, service=service, network_backend=backend)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if service.poll() is not None or time.monotonic() > deadline:
            stop_engine(engine)
            raise EngineUnavailable(
                "podman system service did not start: "
                + _one_line((root / "service.log").read_text() or "no output")
            )
        time.sleep(0.05)
    return engine


def _one_line(exc: BaseException | str) -> str:
    """The gist of a podman failure on one line: its last ``Error:`` line if it has one."""
    text = str(exc)
    command = text.split(" failed: ", 1)[0] if " failed: " in text else ""
    if "Error: " in text:
        text = f"{command}: {text.rsplit('Error: ', 1)[1]}" if command else text
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _remove_network(engine: PodmanEngine) -> None:
    engine.podman("network", "rm", "-f", engine.network, check=False)


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
    _remove_network(engine)
