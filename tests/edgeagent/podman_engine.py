"""A private podman engine serving the Docker API, for tests and benchmarks.

The engine itself lives in :mod:`cloudhub.devtools.engine` (``cloudhub demo`` runs pods on
it too); this module adds the agent's Docker settings pointing at it.
"""

from __future__ import annotations

from cloudhub.devtools.engine import (
    BUSYBOX_IMAGE,
    EngineUnavailable,
    PodmanEngine,
    start_engine,
    stop_engine,
    unavailable_reason,
)

__all__ = [
    "BUSYBOX_IMAGE",
    "EngineUnavailable",
    "PodmanEngine",
    "docker_settings",
    "start_engine",
    "stop_engine",
    "unavailable_reason",
]


def docker_settings(engine: PodmanEngine):
    """Agent Docker settings pointing at the engine (busybox as the sandbox image)."""
    from edgeagent.settings import DockerSettings

    return DockerSettings(
        url=engine.url,
        network=engine.network,
        sandbox_image=engine.image,
        sandbox_command=("sleep", "2147483647"),
        api_timeout=60.0,
    )
