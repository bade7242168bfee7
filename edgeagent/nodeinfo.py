"""What the hello says about this machine: the Node's labels, resources, system info and
addresses, as kubelet registers them (``node_info`` in docs/protocol.md).

Read from the kernel at every connect (no psutil: it costs RSS the agent does not need for
this), so a memory upgrade or a new address shows up at the next session:

- ``capacity``: ``cpu`` (online CPUs, as kubelet counts them), ``memory`` (``MemTotal``
  in Ki, as kubelet), ``pods`` (``node.max_pods``), ``ephemeral-storage`` (the size of the
  file system holding the state directory, where pod volumes and logs go) and the
  ``node.extended_resources``;
- ``allocatable``: capacity minus ``node.reserved_cpu``/``node.reserved_memory``
  (kubelet's ``--system-reserved``);
- ``nodeInfo``: operatingSystem and architecture in Go's names (``linux``, ``arm64``,
  ``amd64``, ``arm``: what ``kubernetes.io/arch`` selectors use), kernel, OS image,
  container runtime, machine and boot ids;
- ``addresses``: the node IP (``InternalIP``) and the node name (``Hostname``).
"""

from __future__ import annotations

import os
import pathlib
import platform
from typing import Any

from edgeagent.settings import AgentSettings

__all__ = ["AGENT_VERSION", "go_arch", "node_info", "runtime_version"]


def _installed_version() -> str:
    """The ``Version:`` of the ``edgefleet`` wheel this package was installed from.

    Read from the ``edgefleet-*.dist-info/METADATA`` beside the package, as a wheel install
    lays it out: ``importlib.metadata`` would import ``email``, ``zipfile`` and ``csv``
    (about 1 MiB of RSS for the agent's lifetime) to find the same line. Anywhere else
    (an editable install, a source tree) it asks ``importlib.metadata``.
    """
    site = pathlib.Path(__file__).resolve().parent.parent
    for info in sorted(site.glob("edgefleet-*.dist-info")):
        try:
            with open(info / "METADATA", encoding="utf-8") as metadata:
                for line in metadata:
                    if line.startswith("Version:"):
                        return line.partition(":")[2].strip()
                    if not line.strip():
                        break  # the headers end at the first empty line
        except OSError:
            continue
    import importlib.metadata

    try:
        return importlib.metadata.version("edgefleet")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "0.1.0"


AGENT_VERSION = _installed_version()
"""This agent's release: the installed ``edgefleet`` distribution's version (so that an
agent upgrade's new venv reports the new one; docs/upgrade.md), reported as the Node's
``kubeletVersion`` by the hub."""

_GO_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "armv8l": "arm",
    "i386": "386",
    "i686": "386",
    "riscv64": "riscv64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}


def go_arch(machine: str) -> str:
    """The Go/Kubernetes architecture name of a ``uname -m`` machine (``aarch64`` →
    ``arm64``); unknown machines are passed through lower-cased."""
    return _GO_ARCH.get(machine.lower(), machine.lower())


def _read(path: str) -> str:
    try:
        return pathlib.Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _mem_total_kib() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
    return None


def _os_image() -> str:
    fields = {}
    for line in _read("/etc/os-release").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key] = value.strip().strip('"')
    return fields.get("PRETTY_NAME") or fields.get("NAME") or platform.system()


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def runtime_version(settings: AgentSettings) -> str:
    """``containerRuntimeVersion`` as kubelet formats it (``<engine>://<version>``): the
    Docker Engine API version the agent speaks, or the process runtime with the Python
    that runs it."""
    if settings.runtime.kind == "docker":
        return "docker://" + settings.runtime.docker.api_version.lstrip("v")
    return f"process://python-{platform.python_version()}"


def node_info(settings: AgentSettings, host_ip: str) -> dict[str, Any]:
    """The hello's ``node_info`` for this machine.

    Args:
        settings: the agent settings (node group, runtime, state directory).
        host_ip: the node IP (``InternalIP``).

    Returns:
        ``{"labels", "capacity", "allocatable", "nodeInfo", "addresses"}`` with quantities
        as Kubernetes quantity strings (cpu in cores or millicores, memory in Ki).
    """
    node = settings.node
    cpus = _cpu_count()
    capacity: dict[str, str] = {"cpu": str(cpus), "pods": str(node.max_pods)}
    allocatable: dict[str, str] = {"pods": str(node.max_pods)}
    allocatable["cpu"] = f"{max(cpus * 1000 - node.reserved_cpu, 0)}m"
    mem = _mem_total_kib()
    if mem is not None:
        capacity["memory"] = f"{mem}Ki"
        allocatable["memory"] = f"{max(mem - node.reserved_memory // 1024, 0)}Ki"
    storage = settings.state_dir if settings.state_dir.exists() else pathlib.Path("/")
    try:
        st = os.statvfs(storage)
        disk = str(st.f_blocks * st.f_frsize)
        capacity["ephemeral-storage"] = allocatable["ephemeral-storage"] = disk
    except OSError:
        pass
    for name, quantity in node.extended_resources.items():
        capacity[name] = allocatable[name] = str(quantity)
    uname = platform.uname()
    info = {
        "operatingSystem": uname.system.lower(),
        "architecture": go_arch(uname.machine),
        "kernelVersion": uname.release,
        "osImage": _os_image(),
        "containerRuntimeVersion": runtime_version(settings),
        "kubeletVersion": f"edgeagent-{AGENT_VERSION}",
        "machineID": _read("/etc/machine-id"),
        "bootID": _read("/proc/sys/kernel/random/boot_id"),
    }
    addresses = [{"type": "Hostname", "address": settings.node_name}]
    if host_ip:
        addresses.insert(0, {"type": "InternalIP", "address": host_ip})
    return {
        "labels": dict(node.labels),
        "capacity": capacity,
        "allocatable": allocatable,
        "nodeInfo": {k: v for k, v in info.items() if v},
        "addresses": addresses,
    }
