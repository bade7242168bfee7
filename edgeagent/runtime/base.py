"""The container runtime interface the pod reconciler drives.

Two implementations: :class:`edgeagent.runtime.docker.DockerRuntime` (the Docker Engine
API through aiodocker: Docker, Moby, balena-engine, podman's service) and
:class:`edgeagent.runtime.process.ProcessRuntime` (child processes, for machines with no
engine). Only :mod:`edgeagent.runtime` talks to a container engine (an import-linter
contract enforces it).

Every container the agent makes carries the labels in :class:`Labels`, so that an agent
that restarts finds and adopts what is running (pod uid, container name, restart count,
spec hash) instead of recreating it, as kubelet does with its ``io.kubernetes.*`` labels.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeagent.runtime.stats import ContainerStats

__all__ = [
    "LABEL_PREFIX",
    "ContainerConfig",
    "ContainerInfo",
    "ContainerRuntime",
    "ContainerState",
    "ExecResult",
    "Labels",
    "Mount",
    "PortMapping",
    "PullPolicy",
    "SandboxConfig",
]

LABEL_PREFIX = "io.edgefleet."


class Labels:
    """Label keys set on every managed container (values are strings)."""

    MANAGED = LABEL_PREFIX + "managed"
    """``"true"`` on everything the agent created."""
    POD_UID = LABEL_PREFIX + "pod.uid"
    POD_NAME = LABEL_PREFIX + "pod.name"
    POD_NAMESPACE = LABEL_PREFIX + "pod.namespace"
    CONTAINER_NAME = LABEL_PREFIX + "container.name"
    """The name in the pod spec; ``"POD"`` for a sandbox (kubelet's convention)."""
    CONTAINER_TYPE = LABEL_PREFIX + "container.type"
    """``"init"``, ``"app"`` or ``"sandbox"``."""
    RESTART_COUNT = LABEL_PREFIX + "container.restart-count"
    """Attempt number, 0 for the first run."""
    SPEC_HASH = LABEL_PREFIX + "container.hash"
    """Hash of the container spec; a changed hash means recreate."""


class PullPolicy(str, enum.Enum):
    """Kubernetes imagePullPolicy."""

    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class ContainerState(str, enum.Enum):
    """Coarse container state, the union of what engines report."""

    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    """A host path made visible in the container.

    Attributes:
        source: absolute host path (a file or directory).
        target: absolute path inside the container.
        read_only: mount read-only (the process runtime cannot enforce it).
    """

    source: str
    target: str
    read_only: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class PortMapping:
    """A container port, published on the host when ``host_port`` is set.

    Attributes:
        container_port: port inside the pod (1-65535).
        protocol: ``"TCP"``, ``"UDP"`` or ``"SCTP"``.
        host_port: host port to publish on, or ``None``.
        host_ip: host address to bind, ``""`` for all.
    """

    container_port: int
    protocol: str = "TCP"
    host_port: int | None = None
    host_ip: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxConfig:
    """The per-pod sandbox that holds the pod's network namespace (Docker runtime).

    Attributes:
        name: engine name (``k8s_POD_<pod>_<ns>_<uid>_<attempt>``).
        hostname: the pod's hostname.
        labels: the managed labels.
        ports: published ports (they belong to the sandbox's network namespace).
    """

    name: str
    hostname: str
    labels: Mapping[str, str]
    ports: tuple[PortMapping, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerConfig:
    """Everything needed to create one container.

    Attributes:
        name: engine name (``k8s_<container>_<pod>_<ns>_<uid>_<attempt>``).
        image: image reference.
        command: Kubernetes ``command`` (the entrypoint); empty: the image's.
        args: Kubernetes ``args`` (the cmd); empty: the image's when ``command`` is
            empty too, none otherwise (Kubernetes rule).
        env: ordered environment (name, value) pairs.
        working_dir: ``workingDir``, or ``""`` for the image's.
        mounts: volume mounts.
        ports: declared container ports (published through the sandbox, or directly on
            the host with ``host_network``).
        labels: the managed labels.
        host_network: use the host's network namespace.
        sandbox_id: join this sandbox's network (and UTS) namespace.
        hostname: hostname when not joining a sandbox.
        cpu_millicores: CPU limit (1000 = one core), ``None`` for none.
        memory_bytes: memory limit, ``None`` for none.
        log_path: where the process runtime writes stdout/stderr (engines choose their
            own; see :meth:`ContainerRuntime.log_path`).
    """

    name: str
    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    working_dir: str = ""
    mounts: tuple[Mount, ...] = ()
    ports: tuple[PortMapping, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    host_network: bool = False
    sandbox_id: str | None = None
    hostname: str = ""
    cpu_millicores: int | None = None
    memory_bytes: int | None = None
    log_path: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerInfo:
    """What the runtime knows about one container.

    Attributes:
        id: engine container id (process runtime: a random hex id).
        name: engine name.
        labels: its labels.
        state: coarse state.
        exit_code: exit code once exited; ``None`` while running or when unknown (the
            process vanished with no record, e.g. after a reboot).
        started_at: wall-clock seconds since the epoch, or ``None`` if never started.
        finished_at: wall-clock seconds since the epoch, or ``None``.
        image: the image reference it was created from.
        image_id: the engine's image id (``""`` if none).
        ip: its (sandbox's) IP address on the pod network, or ``""``.
        oom_killed: the kernel OOM killer ended it.
        error: engine error text (``""`` if none).
    """

    id: str
    name: str
    labels: Mapping[str, str]
    state: ContainerState
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    image: str = ""
    image_id: str = ""
    ip: str = ""
    oom_killed: bool = False
    error: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ExecResult:
    """Outcome of :meth:`ContainerRuntime.exec`.

    Attributes:
        exit_code: the command's exit code.
        output: combined stdout and stderr (truncated to 10 KiB, as kubelet does).
    """

    exit_code: int
    output: bytes


ContainerEventCallback = Callable[[str, Mapping[str, str]], None]
"""``callback(container_id, labels)`` — a container started, exited or was removed."""


class ContainerRuntime(abc.ABC):
    """Create, run, stop and inspect containers. All methods are coroutines unless noted.

    Errors are :class:`edgeagent.errors.ContainerRuntimeError` subclasses; engine
    exceptions never escape.
    """

    kind: str = ""
    """``"docker"`` or ``"process"``."""

    has_images: bool = True
    """Whether containers come from images (pull policies apply)."""

    supports_sandbox: bool = False
    """Whether pods get a network sandbox (and their own IP). Without one, every pod
    uses the host network."""

    @abc.abstractmethod
    async def connect(self) -> str:
        """Reach the engine (and adopt leftover records).

        Returns:
            A one-line description (engine name and version).

        Raises:
            RuntimeUnavailableError: the engine cannot be reached.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections. Running containers keep running."""

    @abc.abstractmethod
    async def ensure_image(self, image: str, policy: PullPolicy) -> None:
        """Make ``image`` present according to ``policy`` (kubelet's rules).

        Raises:
            ImagePullError: with reason ``ErrImagePull`` (the pull failed) or
                ``ErrImageNeverPull`` (absent and policy ``Never``).
        """

    async def create_sandbox(self, config: SandboxConfig) -> str:
        """Create and start a pod sandbox; returns its container id.

        Raises:
            ContainerRuntimeError: this runtime has no sandboxes, or the engine failed.
        """
        raise NotImplementedError(f"the {self.kind} runtime has no pod sandboxes")

    @abc.abstractmethod
    async def create(self, config: ContainerConfig) -> str:
        """Create (not start) a container; returns its id.

        Raises:
            ContainerRuntimeError: the engine refused (bad image, name in use …).
        """

    @abc.abstractmethod
    async def start(self, container_id: str) -> None:
        """Start a created container.

        Raises:
            ContainerNotFoundError: no such container.
            ContainerRuntimeError: it could not start (bad command …).
        """

    @abc.abstractmethod
    async def stop(self, container_id: str, grace: float) -> None:
        """Send SIGTERM, wait up to ``grace`` seconds, then SIGKILL; return once it exited.

        A container that already exited is left as is. Raises
        :class:`ContainerNotFoundError` if there is no such container.
        """

    @abc.abstractmethod
    async def remove(self, container_id: str) -> None:
        """Remove a container (killing it if still running). Missing is not an error."""

    @abc.abstractmethod
    async def list(self, labels: Mapping[str, str] | None = None) -> list[ContainerInfo]:
        """Managed containers (sandboxes included) whose labels include all of ``labels``."""

    @abc.abstractmethod
    async def inspect(self, container_id: str) -> ContainerInfo:
        """One container's current state.

        Raises:
            ContainerNotFoundError: no such container.
        """

    @abc.abstractmethod
    async def exec(self, container_id: str, argv: list[str], timeout: float) -> ExecResult:
        """Run ``argv`` inside a running container (exec probes).

        Raises:
            TimeoutError: it did not finish within ``timeout`` seconds.
            ContainerRuntimeError: it could not be run.
        """

    @abc.abstractmethod
    def log_path(self, info: ContainerInfo) -> str:
        """Where this container's stdout/stderr are kept on the host (``""`` if the
        engine does not say). Not a coroutine."""

    async def container_stats(self) -> list[ContainerStats]:
        """CPU and memory working set of every running pod container: the runtime is the
        metrics sampler's ``edgeagent.metrics.ContainerStatsSource``. Sandboxes are left
        out; so is a container that stops during the call.

        Raises:
            ContainerRuntimeError: the engine could not be asked (the sampler logs it and
                samples the node alone).
        """
        raise NotImplementedError(f"the {self.kind} runtime gives no container stats")

    @abc.abstractmethod
    async def watch(self, callback: ContainerEventCallback) -> None:
        """Call ``callback(container_id, labels)`` whenever a managed container starts,
        exits or is removed, until cancelled. Best effort: the reconciler also resyncs.

        Raises:
            RuntimeUnavailableError: the event stream broke (the caller restarts it).
        """
