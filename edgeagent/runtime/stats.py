"""Per-container CPU and memory: the interface the container runtimes implement, and the
readers they use (the runtime's own, so that it imports nothing of the metrics package).

The sampler asks a :class:`ContainerStatsSource` (the runtime) for the stats of every
running container of the node's pods. Figures are cumulative CPU time and the current
memory working set, the two that the CRI ``ContainerStats`` message and cAdvisor give
kubelet, and the two ``kubectl top pod`` shows.

Helpers for the runtimes:

- Docker Engine API (Docker, Moby, balena-engine, podman's service):
  :func:`usage_from_docker_stats` turns one ``GET /containers/{id}/stats?stream=false``
  answer into a :class:`ResourceUsage`.
- Process runtime: :class:`CgroupReader` reads a cgroup (v2, or v1 ``cpuacct`` and
  ``memory``) when a container has its own (:meth:`CgroupReader.cgroup_of` says where a
  process is); :func:`process_tree_usage` sums a process tree through ``psutil`` when it
  has not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from edgeagent.errors import StatsError

__all__ = [
    "CgroupReader",
    "ContainerStats",
    "ContainerStatsSource",
    "ResourceUsage",
    "process_tree_usage",
    "process_trees_usage",
    "usage_from_docker_stats",
]


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """CPU and memory of one container (or cgroup, or process tree).

    Attributes:
        cpu_usage_core_ns: CPU time used since the container started, all cores, in
            nanoseconds (CRI's ``usage_core_nano_seconds``, Docker's
            ``cpu_stats.cpu_usage.total_usage``, cgroup v2 ``usage_usec`` x 1000).
        memory_working_set_bytes: memory usage minus inactive file pages (bytes), as
            cAdvisor and kubelet define the working set; never negative.
    """

    cpu_usage_core_ns: int
    memory_working_set_bytes: int


@dataclass(frozen=True, slots=True)
class ContainerStats:
    """Stats of one running container of a pod.

    Attributes:
        namespace: the pod's namespace.
        pod: the pod's name.
        container: the container's name in the pod spec.
        container_id: the runtime's id of this container instance; a new id for the same
            (namespace, pod, container) means the container restarted and its CPU counter
            started again from zero.
        cpu_usage_core_ns: cumulative CPU time of this instance (ns), never decreasing
            while the id stays the same.
        memory_working_set_bytes: current working set (bytes).
    """

    namespace: str
    pod: str
    container: str
    container_id: str
    cpu_usage_core_ns: int
    memory_working_set_bytes: int


@runtime_checkable
class ContainerStatsSource(Protocol):
    """What the container runtime implements so that pods' usage is sampled.

    Implemented by the Docker-API runtime (one stats call per running container, e.g. with
    :func:`usage_from_docker_stats`) and by the process runtime (:class:`CgroupReader` or
    :func:`process_tree_usage`).
    """

    async def container_stats(self) -> Sequence[ContainerStats]:
        """Return the stats of every running container of the node's pods.

        One entry per running container; containers of pods the agent does not manage
        (the engine's own, other users') are left out. Called every sampling interval
        (15 s by default), so it should take well under a second.

        Raises:
            Exception: any failure (engine unreachable...). The sampler logs it and
                samples the node without containers; it never stops sampling.
        """
        ...


def usage_from_docker_stats(stats: Mapping[str, Any]) -> ResourceUsage:
    """Extract CPU and working set from a Docker Engine API stats answer.

    The working set is ``memory_stats.usage`` minus the inactive file pages
    (``total_inactive_file`` on cgroup v1, ``inactive_file`` on v2), as the docker CLI and
    cAdvisor compute it.

    Args:
        stats: the JSON of ``GET /containers/{id}/stats?stream=false``.

    Returns:
        The container's usage.

    Raises:
        StatsError: the answer lacks ``cpu_stats.cpu_usage.total_usage`` or has values
            of the wrong type.
    """
    try:
        cpu = int(stats["cpu_stats"]["cpu_usage"]["total_usage"])
        memory = stats.get("memory_stats") or {}
        usage = int(memory.get("usage") or 0)
        detail = memory.get("stats") or {}
        inactive = detail.get("total_inactive_file", detail.get("inactive_file", 0))
        inactive = int(inactive or 0)
    except (KeyError, TypeError, ValueError) as exc:
        raise StatsError("docker stats", f"unexpected answer shape: {exc!r}") from exc
    return ResourceUsage(cpu, max(usage - inactive, 0))


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def _stat_field(text: str, name: str) -> int | None:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return None


class CgroupReader:
    """Reads CPU and working set of a cgroup, on cgroup v2 or v1.

    Args:
        root: where the cgroup filesystem is mounted. v2 (unified) is recognised by
            ``cgroup.controllers`` at the root; otherwise v1 with ``cpuacct`` (or
            ``cpu,cpuacct``) and ``memory`` hierarchies below it.
    """

    def __init__(self, root: str = "/sys/fs/cgroup") -> None:
        self.root = root
        self.version = 2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else 1
        cpuacct = os.path.join(root, "cpuacct")
        if not os.path.isdir(cpuacct):
            cpuacct = os.path.join(root, "cpu,cpuacct")
        self._cpuacct = cpuacct
        self._memory = os.path.join(root, "memory")

    def cgroup_of(self, pid: int | str) -> tuple[str, str]:
        """Where a process is accounted, from ``/proc/<pid>/cgroup``.

        Args:
            pid: a process id, or ``"self"``.

        Returns:
            ``(cpu cgroup, memory cgroup)``: on v2 the unified path twice; on v1 the paths
            in the ``cpuacct`` and ``memory`` hierarchies (they may differ).

        Raises:
            StatsError: the process is gone, or is in neither hierarchy.
        """
        try:
            text = _read(f"/proc/{pid}/cgroup")
        except OSError as exc:
            raise StatsError(f"cgroup of process {pid}", str(exc)) from exc
        cpu = memory = None
        for line in text.splitlines():
            _, controllers, path = line.split(":", 2)
            names = controllers.split(",")
            if self.version == 2 and controllers == "":
                cpu = memory = path
            elif "cpuacct" in names:
                cpu = path
            elif "memory" in names:
                memory = path
        if cpu is None or memory is None:
            raise StatsError(f"cgroup of process {pid}", "no cpu or memory controller")
        return cpu, memory

    def read(self, cgroup: str, memory_cgroup: str | None = None) -> ResourceUsage:
        """Read one cgroup.

        Args:
            cgroup: its path inside the hierarchy (``"/edgeagent/pod-1234"``), as in
                ``/proc/<pid>/cgroup``.
            memory_cgroup: on v1, the path in the ``memory`` hierarchy when it differs
                from ``cgroup`` (see :meth:`cgroup_of`).

        Returns:
            cgroup v2: ``cpu.stat`` ``usage_usec`` x 1000 and ``memory.current`` minus
            ``memory.stat`` ``inactive_file``; v1: ``cpuacct.usage`` and
            ``memory.usage_in_bytes`` minus ``total_inactive_file``.

        Raises:
            StatsError: the cgroup does not exist or its files do not parse.
        """
        rel = cgroup.strip("/")
        try:
            if self.version == 2:
                base = os.path.join(self.root, rel)
                usec = _stat_field(_read(os.path.join(base, "cpu.stat")), "usage_usec")
                current = int(_read(os.path.join(base, "memory.current")))
                inactive = _stat_field(_read(os.path.join(base, "memory.stat")), "inactive_file")
                cpu_ns = (usec or 0) * 1000
            else:
                cpu_ns = int(_read(os.path.join(self._cpuacct, rel, "cpuacct.usage")))
                mem_rel = rel if memory_cgroup is None else memory_cgroup.strip("/")
                mem = os.path.join(self._memory, mem_rel)
                current = int(_read(os.path.join(mem, "memory.usage_in_bytes")))
                inactive = _stat_field(
                    _read(os.path.join(mem, "memory.stat")), "total_inactive_file"
                )
        except (OSError, ValueError) as exc:
            raise StatsError(f"cgroup {cgroup}", str(exc)) from exc
        return ResourceUsage(cpu_ns, max(current - (inactive or 0), 0))


def process_tree_usage(pid: int) -> ResourceUsage:
    """Sum CPU and resident memory over a process and its descendants (``psutil``).

    For a process runtime without a cgroup per pod. CPU counts each live process's own
    and reaped children's time, so a child that exits and is waited for keeps counting;
    memory is the sum of RSS, which counts pages shared between the processes once per
    process (an over-estimate of the working set, as ``ps`` would show).

    Args:
        pid: the pod's top process.

    Returns:
        The tree's usage.

    Raises:
        StatsError: the process no longer exists or cannot be read.
    """
    usage = process_trees_usage([pid]).get(pid)
    if usage is None:
        raise StatsError(f"process {pid}", "exited")
    return usage


def process_trees_usage(pids: Sequence[int]) -> dict[int, ResourceUsage]:
    """:func:`process_tree_usage` of several trees, with one pass over ``/proc`` to find
    every process's parent (psutil's ``children()`` makes that pass once per call: ten
    pods would cost ten).

    Args:
        pids: the trees' top processes.

    Returns:
        Each tree's usage by its top pid; a tree whose top process has exited is left out.

    Raises:
        StatsError: a process exists but cannot be read (permissions).
    """
    import psutil  # lazy: about 2 MB of RSS, only once metrics run

    children = _children_by_parent()
    out: dict[int, ResourceUsage] = {}
    for top in pids:
        cpu_s = 0.0
        rss = 0
        todo = [top]
        try:
            while todo:
                pid = todo.pop()
                todo.extend(children.get(pid, ()))
                try:
                    proc = psutil.Process(pid)
                    with proc.oneshot():
                        t = proc.cpu_times()
                        cpu_s += t.user + t.system + t.children_user + t.children_system
                        rss += proc.memory_info().rss
                except psutil.NoSuchProcess:
                    if pid == top:
                        raise _Gone from None
                except psutil.Error as exc:
                    raise StatsError(f"process {pid}", str(exc)) from exc
        except _Gone:
            continue
        out[top] = ResourceUsage(int(cpu_s * 1e9), rss)
    return out


def _children_by_parent(proc: str = "/proc") -> dict[int, list[int]]:
    """Every process's children, from one read of each ``/proc/<pid>/stat`` (psutil's
    ``process_iter`` reads two files per process and builds an object for each: four times
    slower on a Raspberry Pi's 150 processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue  # exited meanwhile
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


class _Gone(Exception):
    """The top process of a tree exited."""
