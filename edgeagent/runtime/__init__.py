"""Container runtimes (the only package that talks to a container engine).

:func:`make_runtime` builds the configured one; the Docker runtime (and with it
aiodocker and aiohttp, about 14 MiB) is imported only when configured.
"""

from __future__ import annotations

import pathlib

from edgeagent.runtime.base import (
    LABEL_PREFIX,
    ContainerConfig,
    ContainerInfo,
    ContainerRuntime,
    ContainerState,
    ExecResult,
    Labels,
    Mount,
    PortMapping,
    PullPolicy,
    SandboxConfig,
)
from edgeagent.settings import RuntimeSettings

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
    "make_runtime",
]


def make_runtime(
    settings: RuntimeSettings, state_dir: pathlib.Path, host_ip: str = ""
) -> ContainerRuntime:
    """The runtime ``settings.kind`` names, not yet connected (call ``connect()``).

    Args:
        settings: runtime settings.
        state_dir: the agent's state directory (process runtime records live below it).
        host_ip: the node IP, reported as the IP of host-network containers.
    """
    if settings.kind == "process":
        from edgeagent.runtime.process import ProcessRuntime

        return ProcessRuntime(state_dir / "runtime" / "process", settings.process, host_ip)
    from edgeagent.runtime.docker import DockerRuntime  # imports aiodocker: only when used

    return DockerRuntime(settings.docker, host_ip)
